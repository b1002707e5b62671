"""The web dashboard clicked through in a real browser: Debian's chromium driven by
Playwright, against a dashboard served over HTTP, a real Redis and a real worker.

The browser is found on PATH (``chromium``); without it (or without Playwright) these
tests skip, unless ``DELAYQ_REQUIRE_BROWSER`` is set (CI sets it), where they fail.
Screenshots go to ``DELAYQ_SCREENSHOTS`` if set, else to the test's temporary directory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import (
    free_port,
    wait_until,
    wait_until_quiescent,
)
from celery_delayq.web.guard.access import Access

from ..helpers import REMEMBER, celery_process, chromium, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@contextmanager
def dashboard(app: Celery, **options: Any) -> Iterator[str]:
    """The dashboard of ``app`` served over HTTP on a free port; its base URL."""
    from celery_delayq.web import create_app

    with served(create_app(app, **options)) as base:
        yield base


@contextmanager
def served(wsgi_app: Any) -> Iterator[str]:
    """``wsgi_app`` served over HTTP on a free port, in a thread; its base URL."""
    from werkzeug.serving import make_server

    port = free_port()
    server = make_server("127.0.0.1", port, wsgi_app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def remember_task(app: Celery) -> Any:
    if REMEMBER not in app.tasks:  # publishing only: the worker has the real task

        @app.task(name=REMEMBER)
        def remember(label: str = "") -> None: ...

    return app.tasks[REMEMBER]


def due_of(app: Celery, task_id: str) -> float:
    with open_store(app) as store:
        (message,) = store.find(task_id)
        return message.due - store.server_time_ms() / 1000


def confirm(page: Any, title: str) -> None:
    """The confirmation page says how many; confirm it."""
    assert page.locator("h1").inner_text() == title
    page.locator(".confirm button[type=submit]").click()


def test_schedule_list_filter_cancel_promote_reschedule(
    make_app, redis_server, redis_client, browser, screenshots
) -> None:
    app = make_app()
    task = remember_task(app)
    ids = {
        label: task.apply_async((label,), countdown=3600).id
        for label in ("alpha", "beta", "gamma", "delta")
    }
    with (
        celery_process("worker", redis_server.url, {}, "-P", "solo"),
        dashboard(app, access=Access()) as url,
    ):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{url}/scheduled")
        rows = page.locator("table.tasks tbody tr")
        assert rows.count() == 4  # scheduled, and listed
        page.screenshot(path=screenshots / "scheduled.png", full_page=True)

        page.fill("input[name=q]", "BETA")  # filter: search in the arguments
        page.click("button:has-text('Filter')")
        assert rows.count() == 1 and "beta" in rows.first.inner_text()
        page.click("a:has-text('Clear')")

        page.check(f"input[name=ids][value='{ids['alpha']}']")  # cancel one
        page.click("#selected button:has-text('Cancel')")
        confirm(page, "Cancel 1 task?")
        assert page.locator(".flash").inner_text() == "Cancelled 1 task."
        assert rows.count() == 3 and ids["alpha"] not in page.content()

        page.check(f"input[name=ids][value='{ids['beta']}']")  # promote one: it runs now
        page.click("#selected button:has-text('Run now')")
        confirm(page, "Run now 1 task?")
        assert page.locator(".flash").inner_text() == "Promoted 1 task."
        wait_until(lambda: runs(redis_client), timeout=30, what="the promoted task ran")
        assert [run["label"] for run in runs(redis_client)] == ["beta"]

        page.click(f"a:has-text('{ids['gamma']}')")  # reschedule one from its page
        assert page.locator("h1").inner_text() == REMEMBER
        page.fill("input[name=eta]", "2h")
        page.click("button:has-text('Reschedule')")
        confirm(page, "Reschedule 1 task?")
        assert page.locator(".flash").inner_text().startswith("Rescheduled 1 task to ")
        assert 7100 < due_of(app, ids["gamma"]) < 7300

        page.goto(f"{url}/")
        page.screenshot(path=screenshots / "overview.png", full_page=True)

        page.goto(f"{url}/scheduled")  # run everything left: the cancelled one never runs
        page.click("form.all button:has-text('Run all now')")
        confirm(page, "Run now 2 tasks?")
        wait_until(lambda: len(runs(redis_client)) == 3, timeout=30, what="all ran")
        wait_until_quiescent(app, workers=1)
    assert sorted(run["label"] for run in runs(redis_client)) == ["beta", "delta", "gamma"]


def test_without_credentials_the_browser_is_refused(app, browser) -> None:
    with dashboard(app, access=Access("ops", "s3cret")) as url:
        anonymous = browser.new_context()
        response = anonymous.request.get(f"{url}/scheduled")  # a page would prompt
        assert response.status == 401 and "Authentication required" in response.text()
        assert response.headers["www-authenticate"].startswith("Basic")
        anonymous.close()
        signed_in = browser.new_context(http_credentials={"username": "ops", "password": "s3cret"})
        page = signed_in.new_page()
        assert page.goto(f"{url}/scheduled").status == 200
        assert page.locator("h1").inner_text() == "Scheduled"
        signed_in.close()


def test_a_token_login_refuses_a_wrong_token(app, browser) -> None:
    with dashboard(app, access=Access(token="t0ken")) as url:
        page = browser.new_page()
        page.goto(f"{url}/scheduled")
        assert page.url.startswith(f"{url}/login")
        page.fill("input[name=token]", "wrong")
        page.click("button:has-text('Log in')")
        assert "That token is not the one configured." in page.content()
        page.fill("input[name=token]", "t0ken")
        page.click("button:has-text('Log in')")
        assert page.url == f"{url}/scheduled"
        assert page.locator("h1").inner_text() == "Scheduled"
        page.click("button:has-text('Log out')")  # ends the login
        assert page.url.startswith(f"{url}/login")
        page.goto(f"{url}/scheduled")
        assert page.url.startswith(f"{url}/login")


@pytest.mark.promise("security-web-headers", "web-security-headers")
def test_the_security_policy_blocks_nothing_the_pages_use(app, browser) -> None:
    """Every page, a form post and a chart under the Content-Security-Policy, with no
    violation reported in the console and no page error."""
    task_id = remember_task(app).apply_async(("x",), countdown=600).id
    with dashboard(app, access=Access()) as url:
        page = browser.new_page()
        reported: list[str] = []
        page.on("console", lambda message: reported.append(f"{message.type}: {message.text}"))
        page.on("pageerror", lambda error: reported.append(f"page error: {error}"))
        for path in ["/", "/scheduled", f"/task/{task_id}", "/dead", "/doctor", "/login"]:
            response = page.goto(url + path)
            assert response is not None
            assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        page.goto(f"{url}/doctor")
        page.click("button:has-text('Run the full check')")  # a form post, then a redirect
        assert "Last full check" in page.content()
        page.goto(f"{url}/")
        assert page.locator("svg").count() >= 1  # the charts drew
    violations = [
        line for line in reported if "Content Security Policy" in line or "page error" in line
    ]
    assert violations == [], violations


@pytest.mark.promise("security-web-read-only", "web-read-only-refuses-actions")
def test_read_only_shows_tasks_and_offers_no_action(app, browser) -> None:
    task_id = remember_task(app).apply_async(("x",), countdown=600).id
    with dashboard(app, access=Access(), read_only=True) as url:
        page = browser.new_page()
        page.goto(f"{url}/scheduled")
        assert task_id in page.content() and page.locator(".badge").inner_text() == "read-only"
        assert page.locator("input[name=ids]").count() == 0
        assert page.locator("button:has-text('Cancel')").count() == 0
        page.click(f"a:has-text('{task_id}')")
        assert page.locator("button").count() == 0  # the task page has no actions either
        # the pages run no script (their policy allows none): post as the browser would,
        # with its cookies and a valid CSRF token
        token = page.request.get(f"{url}/login").text()
        csrf = token.split('name="csrf_token" value="')[1].split('"')[0]
        status = page.request.post(
            f"{url}/actions/cancel", form={"csrf_token": csrf, "ids": task_id, "confirmed": "yes"}
        ).status
        assert status == 403
    with open_store(app) as store:
        assert [m.task_id for m in store.pending()] == [task_id]


@pytest.mark.promise("web-values-escaped")
def test_a_script_in_task_arguments_is_shown_as_text_and_never_runs(
    app, browser, screenshots
) -> None:
    payloads = ["<script>window.owned = 1</script>", '<img src=x onerror="window.owned = 2">']
    task = remember_task(app)
    ids = [task.apply_async((p,), countdown=600).id for p in payloads]
    celery_delayq.debounce(task, ("k",), key="<script>window.owned = 3</script>", countdown=600)
    with dashboard(app, access=Access()) as url:
        page = browser.new_page()
        for path in ["/scheduled", f"/task/{ids[0]}", f"/task/{ids[1]}", "/scheduled?q=<script>"]:
            page.goto(url + path)
            assert page.evaluate("window.owned") is None, path
        page.goto(f"{url}/task/{ids[0]}")
        assert page.get_by_text(payloads[0]).count() >= 1  # shown, as text
        page.screenshot(path=screenshots / "xss.png", full_page=True)
