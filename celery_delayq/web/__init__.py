"""The web dashboard: ``create_app(celery_app)`` (app.py), served by ``celery delayq web``
or mounted in another web app."""

from .app import create_app

__all__ = ["create_app"]
