"""The dashboard's Limits page in a real browser (Debian's chromium driven by Playwright,
as in test_web_browser.py), against a dashboard served over HTTP, a real Redis and a real
worker whose mover releases a concurrency-limited task: the page shows what ran and
what waits, and a hostile limit key as text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_delayq.testing import wait_until
from celery_delayq.web.guard.access import Access

from ..helpers import celery_process, chromium, publish_limited, runs
from .test_web_browser import dashboard

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

KEY = '<script>window.owned = 1</script> it\'s "quoted"'
#: A task that runs until the test releases it (tests.worker_app.gate): its two slots
#: stay taken while the page is read.
GATED = "tests.worker_app.gated"
LIMITS = {"delayq_concurrency_limits": {GATED: 2}}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def test_the_limits_page_shows_what_runs_and_what_waits(
    make_app, redis_server, redis_client, browser, screenshots
) -> None:
    app = make_app(**LIMITS)
    publish_limited(app, GATED, 5, key=KEY)
    with (
        celery_process("worker", redis_server.url, LIMITS, "-c", "2"),
        dashboard(app, access=Access()) as url,
    ):
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=30, what="two runs")
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{url}/")
        page.click("header nav a:has-text('Limits')")
        assert page.locator("h1").inner_text() == "Limits"
        (row,) = page.locator("table.limits tbody tr").all()
        cells = [cell.inner_text() for cell in row.locator("td").all()]
        assert cells[:7] == ["default", GATED, KEY, "2 at once", "3", "-", "2/2"]
        assert cells[7].startswith("throttled for ")
        assert page.evaluate("window.owned") is None  # the key was shown, never run
        totals = page.locator("#limits-totals").inner_text()
        assert totals == "1 bucket(s): 3 waiting, 2 running, 1 throttled, 0 paused or held"
        page.screenshot(path=screenshots / "limits.png", full_page=True)

        page.fill("input[name=task]", "tests.no_such_task")
        page.click("button:has-text('Filter')")
        assert "task=tests.no_such_task" in page.url
        assert page.locator("table.limits tbody").inner_text() == "No flow-controlled messages."
        recorded = [(run["id"], run.get("phase"), run.get("pid")) for run in runs(redis_client)]
        assert len(recorded) == 2, recorded  # the slots are still held: no third run
        redis_client.rpush("test:gate", *["go"] * 5)  # the runs end, the rest follow
