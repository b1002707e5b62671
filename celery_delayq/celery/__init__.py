"""Adapters to Celery and kombu: the transport and its channel, the worker bootstep, the
beat scheduler, settings, and how an app reaches its store. Built on ``core``."""
