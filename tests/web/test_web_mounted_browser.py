"""Every dashboard action clicked through in chromium (Playwright, as in
test_web_browser.py) with the dashboard mounted under a prefix: here a WSGI dispatcher
(werkzeug's DispatcherMiddleware, as the dashboard guide shows) served over HTTP, with a
real Redis and a real worker; the Django mount: tests/django/test_dashboard_browser.py.

From the list page, through the confirmation page, to the result page, each page's URL
stays under the prefix; then the effect is checked: the cancelled task never runs, the
promoted and resent ones run at once, the rescheduled one at its new time, and the
periodic entry's run now runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until
from celery_delayq.web.guard.access import Access

from ..helpers import celery_process, chromium, runs
from ..web_links import dead_letter
from .test_web_browser import confirm, remember_task, served

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

TOKEN = "correct-horse-battery-staple-42"
TICK = "tests.worker_app.tick"  # records the entry and occurrence it ran for
ENTRY = "nightly report"
#: The tasks the actions act on, by what is done to each.
LABELS = ("cancel", "promote", "reschedule", "resend")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def click_every_action(page: Any, base: str, ids: dict[str, str], entry: str) -> None:
    """Cancel, promote and reschedule (due in 2 s) ``ids``' tasks, send the dead letter
    ``ids["resend"]`` again, and pause, resume and run now the periodic ``entry``: each
    from its list page, through its confirmation page, to the page it lands on, all under
    ``base``."""

    def lands(path: str, flash: str) -> None:
        assert page.url.startswith(f"{base}{path}"), page.url
        assert page.locator(".flash").inner_text().startswith(flash)

    def act(button: Any, action: str, title: str) -> None:
        button.click()
        assert page.url == f"{base}{action}"  # the confirmation page
        confirm(page, title)

    page.goto(f"{base}/scheduled")
    assert page.locator("h1").inner_text() == "Scheduled"
    page.check(f"input[name=ids][value='{ids['cancel']}']")
    act(page.locator("#selected button:has-text('Cancel')"), "/actions/cancel", "Cancel 1 task?")
    lands("/scheduled", "Cancelled 1 task.")
    page.check(f"input[name=ids][value='{ids['promote']}']")
    act(page.locator("#selected button:has-text('Run now')"), "/actions/promote", "Run now 1 task?")
    lands("/scheduled", "Promoted 1 task.")

    page.click(f"a:has-text('{ids['reschedule']}')")  # its own page
    assert page.url == f"{base}/task/{ids['reschedule']}"
    page.fill("input[name=eta]", "2s")  # it runs in 2 s, not in an hour
    act(page.locator("button:has-text('Reschedule')"), "/actions/reschedule", "Reschedule 1 task?")
    lands("/scheduled", "Rescheduled 1 task to ")

    page.click("header nav a:has-text('Dead letters')")
    assert page.url == f"{base}/dead"
    page.check(f"input[name=ids][value='{ids['resend']}']")
    act(
        page.locator("button:has-text('Send again')").first,
        "/dead/resend",
        "Send again 1 dead letter?",
    )
    lands("/dead", "Sent again 1 dead letter.")

    page.click("header nav a:has-text('Periodic')")
    assert page.url == f"{base}/periodic"
    row = page.locator("table.periodic tbody tr").filter(has_text=entry)
    act(row.locator("button:has-text('Pause')"), "/periodic/pause", "Pause 1 periodic entry?")
    lands("/periodic", f"Paused periodic entry {entry!r}.")
    act(row.locator("button:has-text('Resume')"), "/periodic/resume", "Resume 1 periodic entry?")
    lands("/periodic", f"Resumed periodic entry {entry!r}.")
    act(row.locator("button:has-text('Run now')"), "/periodic/run", "Run now 1 periodic entry?")
    lands("/periodic", f"Sent an extra run of periodic entry {entry!r} (task ")


@contextmanager
def mounted(app: Celery) -> Iterator[str]:
    """A Flask app of its own, with the dashboard at /delayq behind a token, served over
    HTTP on a free port; the dashboard's base URL."""
    import flask
    from werkzeug.middleware.dispatcher import DispatcherMiddleware

    from celery_delayq.web import create_app

    host = flask.Flask("host")
    host.secret_key = "the host app's own key"

    @host.get("/")
    def home() -> str:  # the host's own session, which the dashboard must leave alone
        flask.session.setdefault("visits", 0)
        flask.session["visits"] += 1
        return f"visits: {flask.session['visits']}"

    dashboard = create_app(app, access=Access(token=TOKEN))
    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {"/delayq": dashboard})  # type: ignore[method-assign]
    with served(host) as base:
        yield f"{base}/delayq"


@pytest.mark.promise("web-mounted-keeps-prefix", "web-mounted-cookie-own-path")
def test_every_action_works_under_a_wsgi_prefix(make_app, redis_server, redis_client, browser):
    app = make_app()
    task = remember_task(app)
    ids = {label: task.apply_async((label,), countdown=3600).id for label in LABELS}
    dead_letter(app, ids["resend"])
    with pytest.warns(periodic.UnknownTaskWarning):  # the worker's task, not this app's
        periodic.upsert(app, ENTRY, TICK, 3600)
    with (
        celery_process("worker", redis_server.url, {}, "-P", "solo"),
        mounted(app) as base,
    ):
        page = browser.new_page()
        site = base.removesuffix("/delayq")
        assert page.goto(f"{site}/").ok and "visits: 1" in page.content()
        page.goto(f"{base}/scheduled")  # the token login, under the prefix
        assert page.url.startswith(f"{base}/login?next=")
        page.fill("input[name=token]", TOKEN)
        page.click("button:has-text('Log in')")
        assert page.url == f"{base}/scheduled"

        click_every_action(page, base, ids, ENTRY)
        wait_until(lambda: len(runs(redis_client)) == 4, timeout=30, what="four runs")
        page.goto(f"{site}/")
        assert "visits: 2" in page.content()  # the host's session, untouched
    ran = runs(redis_client)
    assert sorted(r["label"] for r in ran if "label" in r) == ["promote", "reschedule", "resend"]
    assert [r["entry"] for r in ran if "entry" in r] == [ENTRY]
    with open_store(app) as store:
        assert store.find(ids["cancel"]) == []
