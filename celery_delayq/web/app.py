"""The web pages as one WSGI application: ``create_app(celery_app)`` gives a Flask app to
serve (``celery delayq web``) or to mount in another web app (README, "Dashboards").

Flask because it is the most widely kept Python web library that renders on the server
with an autoescaping template engine (Jinja), runs on the standard library's threads and
mounts anywhere WSGI does; Flask-WTF adds CSRF protection to every POST.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

from celery import Celery
from flask import Flask, Response, current_app, redirect, request, session
from flask_wtf.csrf import CSRFError, CSRFProtect
from kombu.exceptions import OperationalError
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, make_server

from ..celery.connect import open_store
from ..celery.errors import STORE_OUTAGES, StoreUnavailable
from ..ops.when import ago, iso
from .access import Access, access_of, check_address
from .actions import actions
from .context import WebContext, context, problem
from .sampler import CounterSampler, Totals
from .views import pages


def create_app(
    celery_app: Celery,
    *,
    read_only: bool = False,
    access: Access | None = None,
    secret_key: str | None = None,
    sample_every: float = 15.0,
) -> Flask:
    """The web pages of ``celery_app``'s delayed store.

    ``access`` defaults to the app's settings (web/access.py). ``secret_key`` signs the
    session cookie (CSRF tokens, a token login); by default the ``delayq_web_secret_key``
    setting or ``DELAYQ_WEB_SECRET_KEY``, else a random key, good for this process only.
    """
    flask = Flask(__name__)
    flask.config.update(
        SECRET_KEY=secret_key
        or os.environ.get("DELAYQ_WEB_SECRET_KEY")
        or celery_app.conf.get("delayq_web_secret_key")
        or secrets.token_hex(32),
        WTF_CSRF_TIME_LIMIT=None,  # a page left open for a day still submits
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
    )
    CSRFProtect(flask)
    flask.extensions["celery_delayq"] = WebContext(
        celery_app,
        access if access is not None else access_of(celery_app),
        read_only,
        CounterSampler(lambda: store_totals(celery_app), every=sample_every),
    )
    flask.register_blueprint(pages)
    flask.register_blueprint(actions)
    flask.before_request(authenticate)
    flask.context_processor(lambda: {"read_only": read_only, "now": time.time()})
    flask.jinja_env.filters.update(iso=iso, duration=ago, number="{:,}".format)
    flask.register_error_handler(CSRFError, refused_form)
    flask.register_error_handler(HTTPException, http_error)
    outages: tuple[type[Exception], ...] = (StoreUnavailable, OperationalError, *STORE_OUTAGES)
    for outage in outages:
        flask.register_error_handler(outage, store_down)
    flask.register_error_handler(Exception, unexpected)
    return flask


def store_totals(celery_app: Celery) -> Totals:
    """The counters of every queue, summed (what the moves chart samples)."""
    totals: Totals = {}
    with open_store(celery_app, fail_fast=True) as store:
        for queue in store.queues():
            for name, value in store.stats(queue).items():
                totals[name] = totals.get(name, 0) + value
    return totals


def refused_form(error: CSRFError) -> tuple[str, int]:
    detail = f"{error.description} Reload the page and submit it again."
    return problem(400, "The form could not be checked", detail)


def http_error(error: HTTPException) -> tuple[str, int]:
    return problem(error.code or 500, error.name, error.description or "")


def unexpected(error: Exception) -> tuple[str, int]:
    """A bug: logged with its traceback, and said on the page rather than a bare 500."""
    current_app.logger.exception("celery-delayq web: %s failed", request.path)
    return problem(500, "Something went wrong", f"{type(error).__name__}: {error}")


def store_down(error: Exception) -> tuple[str, int]:
    return problem(503, "The delayed store is unreachable", f"Redis did not answer: {error}")


def authenticate() -> Any:
    """Let a request through when no credentials are set, or when it brings them."""
    access = context().access
    if not access.required or request.endpoint in ("static", "pages.login"):
        return None
    auth = request.authorization
    if auth is not None and auth.type == "basic" and access.basic_ok(auth.username, auth.password):
        return None
    if auth is not None and auth.type == "bearer" and access.token_ok(auth.token):
        return None
    if access.token and access.token_ok(session.get("token")):
        return None
    if access.token and not access.username:
        return redirect(f"{request.script_root}/login?next={request.full_path}")
    body, _ = problem(401, "Authentication required", "This dashboard needs a login.")
    return Response(body, 401, {"WWW-Authenticate": 'Basic realm="celery-delayq"'})


def make_web_server(
    celery_app: Celery, address: str, port: int, *, read_only: bool = False
) -> BaseWSGIServer:
    """A threaded HTTP server of the dashboard (werkzeug's), refusing an address beyond
    this machine unless authentication is configured (AddressRefused)."""
    access = access_of(celery_app)
    check_address(address, access)
    flask = create_app(celery_app, read_only=read_only, access=access)
    return make_server(address, port, flask, threaded=True)
