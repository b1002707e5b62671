"""What every view shares: the Celery app and the dashboard's options, kept on the Flask
app, and the page that says what went wrong."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from celery import Celery
from flask import current_app, render_template, request, session

from .guard.access import Access
from .guard.hosts import HostCheck
from .guard.throttle import FailedLogins
from .sampler import CounterSampler


@dataclass
class WebContext:
    """What every view needs, kept on the Flask app (``context()``)."""

    celery: Celery
    access: Access
    read_only: bool
    sampler: CounterSampler
    hosts: HostCheck
    failed_logins: FailedLogins
    #: The last full doctor check (the store's consistency): when, and what it found.
    full_check: tuple[float, Any] | None = None
    checking: threading.Lock = field(default_factory=threading.Lock)


def context() -> WebContext:
    ctx: WebContext = current_app.extensions["celery_delayq"]
    return ctx


def acting_user() -> str:
    """Who the dashboard's changes are recorded as made by: the basic-auth user it
    checked, the web server's ``REMOTE_USER`` (mounted behind another app's login),
    "token" for a token login, else "anonymous" (no credentials are set). A basic-auth
    header names its user only if it is right: a token login lets a request through
    without looking at one, so any name could ride beside it."""
    auth = request.authorization
    access = context().access
    if auth is not None and auth.type == "basic" and access.basic_ok(auth.username, auth.password):
        return str(auth.username)
    remote = request.environ.get("REMOTE_USER")
    if isinstance(remote, str) and remote:
        return remote
    if access.required and (session.get("login") or auth is not None):
        return "token"
    return "anonymous"


def problem(status: int, title: str, detail: str) -> tuple[str, int]:
    """A page that says what went wrong, never a bare 500."""
    return render_template("problem.html", title=title, detail=detail), status
