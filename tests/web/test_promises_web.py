"""Promises of the dashboard's security model (docs/guides/dashboard.md) that no other test
attacked, against the real app and a real Redis: the ``Secure`` cookie setting, its own
authentication when mounted inside another web app, and the bounded memory of the login
rate limit."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import Celery

from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access

from .test_web_adversarial import STRONG, csrf_token, login, session_cookie

pytestmark = pytest.mark.adversarial

flask = pytest.importorskip("flask")
dispatcher = pytest.importorskip("werkzeug.middleware.dispatcher")


@pytest.mark.promise("web-cookie-flags")
def test_with_secure_cookies_set_the_cookie_is_secure_over_plain_http(
    make_app: Callable[..., Celery],
) -> None:
    """For a proxy that ends TLS: the page comes over HTTP, the browser's over HTTPS."""
    app = make_app(delayq_web_secure_cookies=True)
    client = create_app(app, access=Access(token=STRONG)).test_client()
    assert login(client).status_code == 302
    cookie = session_cookie(client)
    assert cookie.secure and cookie.http_only and cookie.same_site == "Lax"


@pytest.mark.promise("web-mounted-keeps-its-auth")
def test_mounted_inside_another_app_it_still_asks_for_its_credentials(app: Celery) -> None:
    host = flask.Flask("host")
    host.wsgi_app = dispatcher.DispatcherMiddleware(  # type: ignore[method-assign]
        host.wsgi_app, {"/delayq": create_app(app, access=Access(token=STRONG))}
    )
    client = host.test_client()
    for path in ("/delayq/", "/delayq/scheduled", "/delayq/doctor", "/delayq/periodic"):
        refused = client.get(path)
        assert refused.status_code == 302 and refused.location.startswith("/delayq/login")
    assert client.post("/delayq/actions/cancel", data={"ids": ["x"]}).status_code in (302, 400)
    bearer = {"Authorization": f"Bearer {STRONG}"}
    assert client.get("/delayq/scheduled", headers=bearer).status_code == 200
    token = csrf_token(client, "/delayq/login")
    signed_in = client.post(
        "/delayq/login", data={"token": STRONG, "csrf_token": token, "next": "/delayq/scheduled"}
    )
    assert signed_in.status_code == 302 and signed_in.location == "/delayq/scheduled"
    assert client.get("/delayq/scheduled").status_code == 200


@pytest.mark.slow
@pytest.mark.promise("web-rate-limit-memory-bounded")
def test_the_rate_limit_forgets_the_least_recently_failing_beyond_10000_addresses(
    app: Celery,
) -> None:
    """An address blocked by its failed logins is forgotten once 10,000 others failed
    after it: the limit's memory is bounded, whatever the number of addresses."""
    client = create_app(app, access=Access(token=STRONG)).test_client()
    wrong = {"Authorization": "Bearer guess"}

    def attempt(address: str) -> int:
        environ = {"REMOTE_ADDR": address}
        return client.get("/scheduled", headers=wrong, environ_base=environ).status_code

    for _ in range(10):
        assert attempt("192.0.2.7") != 429
    assert attempt("192.0.2.7") == 429
    for n in range(10_000):
        assert attempt(f"10.{n // 65536}.{n // 256 % 256}.{n % 256}") != 429
    assert attempt("192.0.2.7") != 429  # forgotten: it may try again
