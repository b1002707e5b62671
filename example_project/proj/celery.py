"""The Celery app; configured from ``celeryconfig`` so settings stay out of code."""

from __future__ import annotations

from celery import Celery

app = Celery("example_project.proj", include=["example_project.proj.tasks"])
app.config_from_object("example_project.proj.celeryconfig")
