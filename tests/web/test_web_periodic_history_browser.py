"""An entry's change log on the dashboard, in a real browser (Debian's chromium driven by
Playwright, as in test_web_periodic_edit_browser.py) against a real Redis: a change a
user clicks through is recorded as that user's, through the dashboard, and shown on the
entry's history page beside the API's and the CLI's, escaped; crafted records show as
unreadable; the page is behind the dashboard's login."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.audit import acting
from celery_delayq.periodic.audit.actors import os_user
from celery_delayq.web.guard.access import Access

from ..helpers import PERIODIC_TASK as TASK
from .test_web_browser import dashboard
from .test_web_periodic_edit_browser import HEIGHT, WIDTH
from .test_web_periodic_edit_browser import browser as edit_browser

#: The edit tests' module-scoped chromium fixture, reused under its name.
browser = edit_browser

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

NAME = 'reports "weekly" <b>digest</b> ☃'
USER, PASSWORD = "grace <i>hopper</i>", "correct horse"


@pytest.mark.promise("periodic-change-log", "web-periodic-history")
def test_a_pause_clicked_on_the_dashboard_is_in_the_entrys_history(
    periodic_app, browser, screenshots
) -> None:
    periodic.upsert(periodic_app, NAME, TASK, 60, changed_by="api <script>x</script>")
    with acting(via="cli"):
        periodic.upsert(periodic_app, NAME, TASK, 90, kwargs={"team": "<b>growth</b>"})
    access = Access(username=USER, password=PASSWORD)
    with dashboard(periodic_app, access=access) as url:
        anonymous = browser.new_page()
        assert anonymous.request.get(f"{url}/periodic/history?name=x").status == 401
        page = browser.new_page(
            viewport={"width": WIDTH, "height": HEIGHT},
            http_credentials={"username": USER, "password": PASSWORD},
        )
        page.goto(f"{url}/periodic")
        row = page.locator("table.periodic tbody tr").filter(has_text="digest")
        row.locator("button:has-text('Pause')").click()
        page.fill("input[name=note]", "until <b>launch</b>")
        page.locator(".confirm button[type=submit]").click()
        assert page.locator(".flash").inner_text() == f"Paused periodic entry {NAME!r}."

        row.locator("td.name a").click()
        assert page.locator("h1").inner_text() == f"History of {NAME}"
        rows = page.locator("table.changes tbody tr")
        cells = [rows.nth(n).locator("td").all_inner_texts() for n in range(rows.count())]
        assert [c[1:4] for c in cells] == [
            [USER, "dashboard", "paused v3"],
            [os_user(), "cli", "updated v2"],
            ["api <script>x</script>", "api", "created v1"],
        ]
        assert 'note: - → "until <b>launch</b>"' in cells[0][4]
        assert 'kwargs: {} → {"team": "<b>growth</b>"}' in cells[1][4]
        assert page.evaluate("document.querySelector('b, i, script')") is None
        page.screenshot(path=screenshots / "periodic-history.png", full_page=True)


@pytest.mark.promise("periodic-change-log-crafted")
def test_crafted_records_show_as_unreadable(periodic_app, browser) -> None:
    periodic.upsert(periodic_app, "tick", TASK, 60)
    crafted = {"at": int(time.time() * 1000), "who": "<b>x</b>", "via": 1, "action": "y"}
    with open_store(periodic_app) as store:
        key = store.keys.periodic_changes("tick")
        store.client.lpush(key, b"\xff" + b"[" * 10_000, json.dumps(crafted))
    with dashboard(periodic_app, access=Access()) as url:
        page: Any = browser.new_page()
        assert page.goto(f"{url}/periodic/history?name=tick").status == 200
        rows = page.locator("table.changes tbody tr")
        assert rows.count() == 3
        assert page.locator("tr.unreadable").count() == 2
        assert "created" in rows.nth(2).inner_text()
        assert page.goto(f"{url}/periodic/history?name=" + "x" * 300).status == 400
        assert page.goto(f"{url}/periodic/history?name=gone").status == 200
        assert "No change of this entry is recorded" in page.inner_text("table.changes")
