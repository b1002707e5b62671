"""The Celery project: ``celery -A example_project.proj worker`` finds ``app`` here."""

from .celery import app

__all__ = ["app"]
