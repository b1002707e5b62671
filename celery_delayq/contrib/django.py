"""The dashboard inside a Django site, behind Django's own login.

``path("delayq/", include(dashboard_urls(app)))`` serves ``celery_delayq.web``'s pages
under ``/delayq/``: an anonymous visitor is sent to ``LOGIN_URL``, a signed-in user who
is not staff gets 403, staff get the dashboard. Django's login is the gate, so the
dashboard's own basic auth and token are not asked for; its forms keep their own CSRF
tokens (Flask-WTF), so Django's CSRF check is left to them.

The pages are a WSGI application: each request, whether Django is served over WSGI or
ASGI, is handed to it with ``SCRIPT_NAME`` set to the mount point (a proxy's
``SCRIPT_NAME`` included), so every link, form and redirect it makes stays under it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterable
from typing import Any

from celery import Celery
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, re_path
from django.utils.crypto import salted_hmac
from django.views.decorators.csrf import csrf_exempt

from ..web.app import create_app
from ..web.guard.access import Access

View = Callable[..., HttpResponse]
#: The WSGI keys a request served by Django under ASGI lacks.
WSGI_DEFAULTS: dict[str, Any] = {
    "wsgi.version": (1, 0),
    "wsgi.multithread": True,
    "wsgi.multiprocess": True,
    "wsgi.run_once": False,
}


def is_staff(user: Any) -> bool:
    """Who may use the dashboard by default: active staff users."""
    return bool(user.is_active and user.is_staff)


def dashboard_urls(
    celery_app: Celery,
    *,
    allow: Callable[[Any], bool] = is_staff,
    read_only: bool = False,
    name: str = "delayq-dashboard",
) -> list[URLPattern]:
    """URL patterns to ``include()`` under a prefix of your choice: every path below it
    is a dashboard page. ``allow(user)`` says which signed-in users get in."""
    view = dashboard_view(celery_app, allow=allow, read_only=read_only)
    return [re_path(r"^(?P<path>.*)$", view, name=name)]


def dashboard_view(
    celery_app: Celery, *, allow: Callable[[Any], bool] = is_staff, read_only: bool = False
) -> View:
    """A Django view serving the dashboard; it takes the path below its mount point as
    its ``path`` argument. The Flask app is built on the first request (Django's settings
    are read then, not at import)."""
    pages: list[Any] = []

    def dashboard(request: HttpRequest, path: str = "") -> HttpResponse:
        request.get_host()  # ALLOWED_HOSTS, whatever the middleware (the pages allow any)
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not allow(user):
            raise PermissionDenied("the celery-delayq dashboard is for staff only")
        if not pages:
            pages.append(_build(celery_app, read_only))
        return call_wsgi(pages[0], request, path)

    exempt: View = csrf_exempt(dashboard)  # the dashboard's forms carry their own tokens
    return exempt


def _build(celery_app: Celery, read_only: bool) -> Any:
    """The dashboard for a Django mount: no login of its own (Django's is the gate), any
    Host (Django checks ``ALLOWED_HOSTS``), and a secret key derived from Django's, so
    every process of the site accepts the same session and CSRF tokens."""
    secret = salted_hmac("celery_delayq.contrib.django", "dashboard session").hexdigest()
    return create_app(
        celery_app,
        read_only=read_only,
        access=Access(),
        secret_key=secret,
        allowed_hosts=["*"],
        warn_without_credentials=False,
    )


def call_wsgi(app: Any, request: HttpRequest, path: str) -> HttpResponse:
    """Run one request through the WSGI ``app`` mounted where ``path`` begins, and turn
    its answer into a Django response."""
    mount = request.path[: len(request.path) - len(path)].rstrip("/")
    # WSGI carries paths as the bytes of the URL, each byte one latin-1 character.
    environ = {
        "wsgi.errors": sys.stderr,
        **WSGI_DEFAULTS,
        **request.META,  # under ASGI, it has no wsgi.* keys: the defaults stand
        "SCRIPT_NAME": mount.encode().decode("latin-1"),
        "PATH_INFO": ("/" + path).encode().decode("latin-1"),
        "wsgi.url_scheme": request.scheme,  # as Django sees it (SECURE_PROXY_SSL_HEADER)
        "wsgi.input": io.BytesIO(request.body),
        "CONTENT_LENGTH": str(len(request.body)),
    }
    answer: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        answer["status"], answer["headers"] = status, headers
        return lambda data: None  # the legacy write(): Flask never calls it

    chunks: Iterable[bytes] = app(environ, start_response)
    try:
        body = b"".join(chunks)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return _response(answer["status"], answer["headers"], body)


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> HttpResponse:
    code, _, reason = status.partition(" ")
    response = HttpResponse(body, status=int(code), reason=reason or None)
    for name, value in headers:
        if name.lower() == "set-cookie":
            response.cookies.load(value)  # several may come: keep each
        else:
            response[name] = value
    return response
