"""Adversarial tests: hostile input against real servers and processes (issue 25)."""
