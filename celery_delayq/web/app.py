"""The web pages as one WSGI application: ``create_app(celery_app)`` gives a Flask app to
serve (``celery delayq web``) or to mount in another web app (docs/guides/dashboard.md).

Flask because it is the most widely kept Python web library that renders on the server
with an autoescaping template engine (Jinja), runs on the standard library's threads and
mounts anywhere WSGI does; Flask-WTF adds CSRF protection to every POST.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from typing import Any

from celery import Celery
from flask import Flask, Response, current_app, redirect, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from flask_wtf.csrf import CSRFError, CSRFProtect
from kombu.exceptions import OperationalError
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, make_server

from ..brokers.connect import open_store
from ..config.dashboard import WebConfig
from ..config.errors import STORE_OUTAGES, StoreUnavailable
from ..ops.when import ago, iso
from .actions import actions
from .context import WebContext, context, problem
from .guard.access import Access, access_of, check_address
from .guard.headers import secure_headers
from .guard.hosts import HostCheck, allowed_hosts_of
from .guard.throttle import FailedLogins
from .links import this_page
from .periodic_form import editing, not_editable
from .present import clipped, utc
from .sampler import CounterSampler, Totals
from .views import pages

logger = logging.getLogger(__name__)
#: The largest request body (a form) read: the pages' forms are a few kB.
MAX_BODY = 1024 * 1024


class SessionCookies(SecureCookieSessionInterface):
    """The session cookie is ``Secure`` whenever the page came over HTTPS (or always,
    with ``delayq_web_secure_cookies``, for a proxy that ends TLS in front of it), and
    is sent to the dashboard's own paths only: mounted in another app, it neither
    overwrites that app's cookie of the same name nor is sent to its pages."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return bool(app.config["SESSION_COOKIE_SECURE"] or request.is_secure)

    def get_cookie_path(self, app: Flask) -> str:
        return request.script_root or "/"


def create_app(
    celery_app: Celery,
    *,
    read_only: bool = False,
    access: Access | None = None,
    secret_key: str | None = None,
    sample_every: float = 15.0,
    allowed_hosts: Iterable[str] | None = None,
    warn_without_credentials: bool = True,
) -> Flask:
    """The web pages of ``celery_app``'s delayed store.

    ``access`` defaults to the app's settings (web/guard/access.py). ``secret_key`` signs the
    session cookie (CSRF tokens, a token login); by default the ``delayq_web_secret_key``
    setting or ``DELAYQ_WEB_SECRET_KEY``, else a random key, good for this process only.
    ``allowed_hosts``: the Host names it answers besides loopback (guard/hosts.py); by default
    the ``delayq_web_allowed_hosts`` setting. Without credentials it logs a warning:
    mounted in another app it is open to whoever reaches that app.
    """
    access = access if access is not None else access_of(celery_app)
    if warn_without_credentials and not access.required:
        logger.warning(
            "celery-delayq web: the dashboard has no credentials: anyone who reaches it can "
            "cancel and run tasks; set delayq_web_token (or delayq_web_username and "
            "delayq_web_password)"
        )
    settings = WebConfig.from_app(celery_app)
    flask = Flask(__name__)
    flask.session_interface = SessionCookies()
    flask.config.update(
        SECRET_KEY=secret_key or settings.secret_key or secrets.token_hex(32),
        WTF_CSRF_TIME_LIMIT=None,  # a page left open for a day still submits
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=bool(settings.secure_cookies),
        MAX_CONTENT_LENGTH=MAX_BODY,
    )
    CSRFProtect(flask)
    hosts = allowed_hosts_of(celery_app) if allowed_hosts is None else list(allowed_hosts)
    flask.extensions["celery_delayq"] = WebContext(
        celery_app,
        access,
        read_only,
        CounterSampler(lambda: store_totals(celery_app), every=sample_every),
        HostCheck(hosts),
        FailedLogins(),
    )
    flask.register_blueprint(pages)
    flask.register_blueprint(actions)
    flask.register_blueprint(editing)
    flask.before_request(check_host)
    flask.before_request(authenticate)
    flask.after_request(secure_headers)
    flask.context_processor(
        lambda: {"read_only": read_only, "now": time.time(), "logged_in": "login" in session}
    )
    flask.jinja_env.globals.update(this_page=this_page, not_editable=not_editable)
    flask.jinja_env.filters.update(
        iso=iso, duration=ago, number="{:,}".format, clip=clipped, utc=utc
    )
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


def check_host() -> Any:
    """Refuse a Host header that does not name this dashboard (DNS rebinding)."""
    if context().hosts.allows(request.headers.get("Host")):
        return None
    return problem(
        400,
        "Unknown host",
        "This dashboard does not answer to that host name. Behind a proxy, add the name "
        "it is served under to delayq_web_allowed_hosts.",
    )


def authenticate() -> Any:
    """Let a request through when no credentials are set, or when it brings them."""
    ctx = context()
    access = ctx.access
    if not access.required or request.endpoint in ("static", "pages.login"):
        return None
    if access.digest_ok(session.get("login"), current_app.secret_key or ""):
        return None
    auth = request.authorization
    if auth is not None:
        refused = throttled()
        if refused is not None:
            return refused
        if auth.type == "basic" and access.basic_ok(auth.username, auth.password):
            return None
        if auth.type == "bearer" and access.token_ok(auth.token):
            return None
        ctx.failed_logins.failed(request.remote_addr or "")
    if access.token and not access.username:
        return redirect(url_for("pages.login", next=this_page()))
    body, _ = problem(401, "Authentication required", "This dashboard needs a login.")
    return Response(body, 401, {"WWW-Authenticate": 'Basic realm="celery-delayq"'})


def throttled() -> Response | None:
    """A 429 when this client address failed to log in too often of late."""
    wait = context().failed_logins.retry_after(request.remote_addr or "")
    if not wait:
        return None
    body, _ = problem(
        429, "Too many failed logins", f"Try again in {wait:.0f} seconds from this address."
    )
    return Response(body, 429, {"Retry-After": str(int(wait) + 1)})


def make_web_server(
    celery_app: Celery, address: str, port: int, *, read_only: bool = False
) -> BaseWSGIServer:
    """A threaded HTTP server of the dashboard (werkzeug's), refusing an address beyond
    this machine unless authentication is configured (AddressRefused)."""
    access = access_of(celery_app)
    check_address(address, access)
    hosts = [address, *allowed_hosts_of(celery_app)]
    flask = create_app(
        celery_app,
        read_only=read_only,
        access=access,
        allowed_hosts=hosts,
        warn_without_credentials=False,  # check_address: it serves loopback alone
    )
    return make_server(address, port, flask, threaded=True)
