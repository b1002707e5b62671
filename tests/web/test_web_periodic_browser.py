"""The dashboard's Periodic page clicked through in a real browser (Debian's chromium
driven by Playwright, as in test_web_browser.py): pause, resume and run now an entry with
a crafted name, against a dashboard served over HTTP, a real Redis and a real worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from celery.schedules import crontab

from celery_delayq import periodic
from celery_delayq.testing import wait_until
from celery_delayq.web.guard.access import Access

from ..helpers import celery_process, chromium, runs
from .test_web_browser import confirm, dashboard

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

TICK = "tests.worker_app.tick"  # records the entry and occurrence it ran for
NAME = 'nightly "<b>report</b>" it\'s ☃ <script>window.owned = 1</script>'
#: A name a browser would change in a form field, were it not quoted there.
CHANGED = "line\r\nbreak\n NUL \x00 %41"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def entry(app: Any) -> Any:
    info = periodic.get(app, NAME)
    assert info is not None
    return info


def enabled(app: Any) -> bool:
    return bool(entry(app).entry.enabled)


def last_started(app: Any) -> Any:
    return entry(app).history.last_started


def test_pause_resume_and_run_now_an_entry(
    make_app, redis_server, redis_client, browser, tmp_path
) -> None:
    app = make_app()
    with pytest.warns(periodic.UnknownTaskWarning):  # the worker's task, not this app's
        periodic.upsert(app, NAME, TICK, crontab(minute=0, hour=3), timezone="Europe/Berlin")
        periodic.upsert(app, CHANGED, TICK, 3600)
    with (
        celery_process("worker", redis_server.url, {}, "-P", "solo"),
        dashboard(app, access=Access()) as url,
    ):
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{url}/")
        page.click("header nav a:has-text('Periodic')")
        assert page.locator("h1").inner_text() == "Periodic"
        row = page.locator("table.periodic tbody tr").filter(has_text="nightly")
        assert row.locator("td.name").inner_text() == NAME  # shown as text
        assert "crontab 0 3 * * *" in row.inner_text() and "Europe/Berlin" in row.inner_text()
        assert row.locator("time").count() == 3  # its next runs
        page.screenshot(path=tmp_path / "periodic.png", full_page=True)

        row.locator("button:has-text('Pause')").click()
        confirm(page, "Pause 1 periodic entry?")
        assert page.locator(".flash").inner_text() == f"Paused periodic entry {NAME!r}."
        assert "paused" in row.inner_text() and row.locator("time").count() == 0
        assert not enabled(app)

        row.locator("button:has-text('Resume')").click()
        confirm(page, "Resume 1 periodic entry?")
        assert page.locator(".flash").inner_text() == f"Resumed periodic entry {NAME!r}."
        assert "enabled" in row.inner_text() and enabled(app)

        row.locator("button:has-text('Run now')").click()
        confirm(page, "Run now 1 periodic entry?")
        flash = page.locator(".flash").inner_text()
        assert flash.startswith(f"Sent an extra run of periodic entry {NAME!r} (task ")
        wait_until(lambda: runs(redis_client), timeout=30, what="the run now ran")
        (ran,) = runs(redis_client)
        assert ran["entry"] == NAME and flash.endswith(f"(task {ran['id']}).")
        wait_until(lambda: last_started(app), timeout=30, what="the worker recorded the run")
        page.reload()
        assert "none recorded" not in row.inner_text() and "started " in row.inner_text()
        assert page.evaluate("window.owned") is None

        other = page.locator("table.periodic tbody tr").filter(has_text="break")
        other.locator("button:has-text('Pause')").click()
        confirm(page, "Pause 1 periodic entry?")
        assert page.locator(".flash").inner_text() == f"Paused periodic entry {CHANGED!r}."
        assert not periodic.get(app, CHANGED).entry.enabled  # type: ignore[union-attr]
        assert enabled(app)  # the other one, as it was
