"""The dashboard mounted under a prefix (werkzeug's DispatcherMiddleware, as the dashboard
guide shows) against a real Redis: every page crawled, every form and its confirmation
submitted, and every link, form target and redirect kept under the prefix (the Django
mount: tests/django/test_site.py; clicking through both in chromium:
tests/web/test_web_mounted_browser.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from celery import Celery

from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access

from ..web_links import ACTIONS, Answer, Crawl, stocked

pytestmark = pytest.mark.integration

flask = pytest.importorskip("flask")
werkzeug_test = pytest.importorskip("werkzeug.test")
DispatcherMiddleware = pytest.importorskip("werkzeug.middleware.dispatcher").DispatcherMiddleware

TOKEN = "correct-horse-battery-staple-42"


def werkzeug_fetch(client: Any) -> Any:
    def fetch(method: str, url: str, fields: list[tuple[str, str]]) -> Answer:
        data = werkzeug_test.MultiDict(fields) if method == "post" else None
        answer = client.open(url, method=method.upper(), data=data)
        return Answer(answer.status_code, answer.headers.get("Location"), answer.get_data(True))

    return fetch


def csrf_token(client: Any, path: str) -> str:
    body = client.get(path).get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]


@pytest.fixture
def host(app: Celery) -> Any:
    """A Flask app of its own with the dashboard mounted at /delayq, behind a token."""
    host = flask.Flask("host")
    dashboard = create_app(app, access=Access(token=TOKEN))
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/delayq": dashboard})  # type: ignore[method-assign]
    return host


@pytest.mark.promise("web-mounted-keeps-prefix", "web-mounted-cookie-own-path")
def test_under_a_wsgi_prefix_every_link_form_and_redirect_keeps_the_prefix(app, host) -> None:
    stocked(app, "tests.noop")
    client = host.test_client()
    crawl = Crawl(werkzeug_fetch(client), "/delayq", typed={"eta": "1h", "token": TOKEN})
    crawl.request("get", "/delayq/scheduled?task=tests.noop")  # sent to the login page
    crawl.submit_next()  # the login form, with the token typed: back to the page asked for
    assert [url for _, url, _ in crawl.requests[:4]] == [
        "/delayq/scheduled?task=tests.noop",
        "/delayq/login?next=/delayq/scheduled?task%3Dtests.noop",
        "/delayq/login",
        "/delayq/scheduled?task=tests.noop",
    ]
    crawl.pages("/delayq/")
    crawl.forms()
    crawl.request("get", "/delayq/no-such-page")  # the pages that say what went wrong
    crawl.request("post", "/delayq/actions/cancel")  # no CSRF token
    assert [status for *_, status in crawl.requests[-2:]] == [404, 400]
    assert crawl.strays == []
    assert {path.removeprefix("/delayq") for path in crawl.posted()} >= ACTIONS | {"/doctor"}
    assert client.get_cookie("session", path="/delayq") is not None  # its own paths only
    assert client.get_cookie("session", path="/") is None
    crawl.release()  # the logout: back to the login page
    assert crawl.requests[-2:] == [("POST", "/delayq/logout", 302), ("GET", "/delayq/login", 200)]
    assert crawl.strays == []


@pytest.mark.promise("web-redirects-stay-on-site")
@pytest.mark.parametrize("target", ["/admin/", "/delayqx", "//evil.example/delayq/", "/scheduled"])
def test_an_action_goes_back_to_a_page_under_the_prefix_only(app, host, target) -> None:
    """A ``next`` outside the prefix (the host app's pages, another site) lands on the
    dashboard's overview."""
    client = host.test_client()
    task_id = app.send_task("tests.noop", countdown=600).id
    form = {"token": TOKEN, "csrf_token": csrf_token(client, "/delayq/login"), "next": target}
    assert client.post("/delayq/login", data=form).location == "/delayq/"
    token = csrf_token(client, "/delayq/scheduled")  # the login's fresh session
    form = {"ids": [task_id], "confirmed": "yes", "csrf_token": token, "next": target}
    assert client.post("/delayq/actions/promote", data=form).location == "/delayq/"
    form["next"] = "/delayq/scheduled?queue=default"
    assert client.post("/delayq/actions/promote", data=form).location == form["next"]


@pytest.mark.promise("web-mounted-keeps-prefix")
def test_the_login_brings_back_to_a_task_whose_id_holds_url_characters(app, host) -> None:
    task_id = app.send_task("tests.noop", task_id="a?b #c%41", countdown=600).id
    client = host.test_client()
    page = "/delayq/task/a%3Fb%20%23c%2541"
    sent = client.get(page)
    assert sent.location == "/delayq/login?next=/delayq/task/a%253Fb%2520%2523c%252541"
    form = {"token": TOKEN, "csrf_token": csrf_token(client, sent.location), "next": page}
    back = client.post("/delayq/login", data=form).location
    assert back == page and task_id in client.get(back).get_data(as_text=True)
