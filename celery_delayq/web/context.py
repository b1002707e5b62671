"""What every view shares: the Celery app and the dashboard's options, kept on the Flask
app, and the page that says what went wrong."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from flask import current_app, render_template

from .access import Access
from .sampler import CounterSampler


@dataclass
class WebContext:
    """What every view needs, kept on the Flask app (``context()``)."""

    celery: Celery
    access: Access
    read_only: bool
    sampler: CounterSampler


def context() -> WebContext:
    ctx: WebContext = current_app.extensions["celery_delayq"]
    return ctx


def problem(status: int, title: str, detail: str) -> tuple[str, int]:
    """A page that says what went wrong, never a bare 500."""
    return render_template("problem.html", title=title, detail=detail), status
