"""The web dashboard: ``create_app(celery_app)`` (app.py), served by ``celery delayq web``
or mounted in another web app. Flask comes with the ``web`` extra, so it is imported only
when ``create_app`` is first used: without it the package still installs and imports."""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
