"""The Periodic page's editing clicked through in a real browser (Debian's chromium driven
by Playwright, as in test_web_browser.py), against a dashboard served over HTTP and a real
Redis: the table fits a 1,280 px wide window with every row's buttons in view, and a user
adds an entry with the form (previewing its runs first), edits it, pauses it with a note
and removes it through the confirmation, on the dashboard's own server and mounted under
a WSGI prefix behind a token login."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.web.guard.access import Access

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import chromium
from .test_web_browser import dashboard
from .test_web_mounted_browser import TOKEN, mounted

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

WIDTH, HEIGHT = 1280, 800


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def realistic_entries(app: Celery) -> None:
    """Entries as a real deployment has them: long dotted names and task names, a crontab
    in a zone, an rrule between bounds, a one-off, a description, runs recorded."""
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    periodic.upsert(
        app,
        "billing.invoices.generate-monthly-statements-for-enterprise-customers-eu-west-1",
        TASK,
        crontab(minute="15,45", hour="2-5", day_of_week="mon-fri"),
        timezone="America/Argentina/ComodRivadavia",
        kwargs={"region": "eu-west-1", "dry_run": False},
        description="Monthly statements for every enterprise customer in the EU, sent by "
        "mail and archived to the cold bucket; owner: billing on-call (#billing-ops)",
    )
    periodic.upsert(
        app,
        "reports.weekly-engagement-digest",
        TASK,
        "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,WE,FR;BYHOUR=9,17;BYMINUTE=30;BYSECOND=0",
        timezone="Europe/Berlin",
        start_time=start,
        expires=start + timedelta(days=365),
        description="Engagement digest for the product team",
    )
    periodic.upsert(
        app,
        "maintenance.vacuum_analyze_all_tenant_databases_sequentially_one_by_one",
        TASK,
        periodic.clocked(datetime(2031, 3, 14, 1, 59, 26, tzinfo=timezone.utc)),
        timezone="Pacific/Chatham",
        one_off=True,
    )
    periodic.upsert(app, "heartbeat", TASK, 30, enabled=False)
    with open_store(app) as store:
        history = EntryHistory(store.client, store.keys)
        for minute in range(3):
            history.ran("heartbeat", start + timedelta(minutes=minute), start)
        history.count("reports.weekly-engagement-digest", late=12345, missed=67890)


def assert_fits(page: Any) -> None:
    """Nothing scrolls sideways, and every row's action buttons lie whole inside the
    window and inside the card that holds the table (not cut off by it)."""
    page_scrolls = page.evaluate(
        "[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    assert page_scrolls[0] <= page_scrolls[1], page_scrolls
    card = page.locator("section.card:has(table.periodic)")
    card_box = card.bounding_box()
    rows = page.locator("table.periodic tbody tr")
    assert rows.count() >= 4
    for at in range(rows.count()):
        controls = rows.nth(at).locator(".actions button, .actions a")
        assert controls.count() == 4, rows.nth(
            at
        ).inner_text()  # pause or resume, run, edit, remove
        for each in range(controls.count()):
            box = controls.nth(each).bounding_box()
            label = controls.nth(each).inner_text()
            assert box is not None and box["width"] > 0, label
            assert box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (label, box)
            assert box["x"] + box["width"] <= card_box["x"] + card_box["width"], (label, box)
    assert card.evaluate("e => e.scrollWidth <= e.clientWidth"), "the table scrolls in its card"


@pytest.mark.promise("web-periodic-fits-1280")
def test_the_table_fits_a_1280_pixel_window_with_every_button_in_view(
    periodic_app, browser, screenshots
) -> None:
    realistic_entries(periodic_app)
    with dashboard(periodic_app, access=Access()) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{url}/periodic")
        page.screenshot(path=screenshots / "periodic-1280.png", full_page=True)
        assert_fits(page)


NAME = 'reports "weekly" <b>digest</b> ☃'


def click_through(page: Any, base: str, app: Celery, shots: Path) -> None:
    """What a user does on the Periodic page under ``base``: add an entry with the form
    (a mistake first, said beside its field; then a preview of its runs), edit it, pause
    it with a note, and remove it through the confirmation; each page under ``base``.
    What the stylesheet shows or hides is awaited (``expect``) until it applies."""
    from playwright.sync_api import expect

    def lands(path: str, flash: str) -> None:
        assert page.url == f"{base}{path}", page.url
        assert page.locator(".flash").inner_text() == flash

    page.goto(f"{base}/periodic")
    page.click("a:has-text('New entry')")
    assert page.url == f"{base}/periodic/new" and page.locator("h1").inner_text() == (
        "New periodic entry"
    )
    expect(page.locator("#field-every")).to_be_visible()
    expect(page.locator("#field-cron")).to_be_hidden()
    page.fill("#field-name", NAME)
    page.fill("#field-task", TASK)
    page.check("#kind-crontab")  # the crontab's field shows, the interval's hides
    expect(page.locator("#field-cron")).to_be_visible()
    expect(page.locator("#field-every")).to_be_hidden()
    page.fill("#field-cron", "30 9 * * mon-fry")
    page.select_option("#field-timezone", "Europe/Berlin")
    page.fill("#field-start_time", "2030-06-01T00:00")
    page.fill("#field-kwargs", '{"team": "growth"}')
    page.click("button:has-text('Preview')")
    assert page.url == f"{base}/periodic/save"
    assert "Invalid weekday literal 'fry'" in page.locator("#error-cron").inner_text()
    assert page.locator(".preview").count() == 0 and periodic.get(app, NAME) is None
    page.screenshot(path=shots / "periodic-form-error.png", full_page=True)

    page.fill("#field-cron", "30 9 * * mon-fri")  # the rest is as it was typed
    page.click("button:has-text('Preview')")
    runs = page.locator(".preview tbody tr")
    assert runs.count() == 5 and page.locator(".error").count() == 0
    assert runs.first.inner_text().split("\t") == [
        "Mon 2030-06-03 09:30:00 CEST",
        "2030-06-03 07:30:00",
    ]
    assert page.locator(".preview th").all_text_contents() == ["in Europe/Berlin", "UTC"]
    assert periodic.get(app, NAME) is None  # nothing saved yet
    page.screenshot(path=shots / "periodic-form-preview.png", full_page=True)
    page.click("button:has-text('Save')")
    lands("/periodic", f"Added periodic entry {NAME!r}.")
    row = page.locator("table.periodic tbody tr").filter(has_text="digest")
    assert row.locator("td.name").inner_text() == NAME
    assert "crontab 30 9 * * mon-fri" in row.inner_text() and "Europe/Berlin" in row.inner_text()

    row.locator("a:has-text('Edit')").click()
    assert page.locator("h1").inner_text() == "Edit periodic entry"
    assert page.locator("#field-cron").input_value() == "30 9 * * mon-fri"
    assert page.locator("#field-timezone").input_value() == "Europe/Berlin"
    page.fill("#field-cron", "0 18 * * fri")
    page.click("button:has-text('Preview')")
    assert page.locator(".preview tbody tr").first.inner_text().split("\t") == [
        "Fri 2030-06-07 18:00:00 CEST",
        "2030-06-07 16:00:00",
    ]
    page.click("button:has-text('Save')")
    lands("/periodic", f"Saved periodic entry {NAME!r}.")
    assert "crontab 0 18 * * fri" in row.inner_text()

    row.locator("button:has-text('Pause')").click()
    assert page.url == f"{base}/periodic/pause"
    assert page.locator("h1").inner_text() == "Pause 1 periodic entry?"
    page.fill("input[name=note]", "until the <b>launch</b> is signed off")
    page.locator(".confirm button[type=submit]").click()
    lands("/periodic", f"Paused periodic entry {NAME!r}.")
    assert "paused" in row.inner_text()
    assert row.locator(".note").inner_text() == "until the <b>launch</b> is signed off"
    page.screenshot(path=shots / "periodic-paused-with-note.png", full_page=True)
    info = periodic.get(app, NAME)
    assert info is not None and not info.entry.enabled
    assert dict(info.entry.kwargs) == {"team": "growth"}

    row.locator("button:has-text('Remove')").click()
    assert page.url == f"{base}/periodic/remove"
    assert page.locator("h1").inner_text() == "Remove 1 periodic entry?"
    page.locator(".confirm button[type=submit]").click()
    lands("/periodic", f"Removed periodic entry {NAME!r}.")
    assert row.count() == 0 and periodic.get(app, NAME) is None
    assert page.evaluate("document.querySelector('b')") is None  # every name shown as text


@pytest.mark.promise(
    "web-periodic-preview", "web-periodic-errors-beside-fields", "web-periodic-pause-note"
)
def test_a_user_adds_edits_pauses_and_removes_an_entry(periodic_app, browser, screenshots) -> None:
    with dashboard(periodic_app, access=Access()) as url:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        click_through(page, url, periodic_app, screenshots)


@pytest.mark.promise("web-mounted-keeps-prefix")
def test_the_same_under_a_wsgi_prefix_behind_a_token(periodic_app, browser, tmp_path) -> None:
    with mounted(periodic_app) as base:
        page = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.goto(f"{base}/periodic")
        assert page.url.startswith(f"{base}/login?next=")
        page.fill("input[name=token]", TOKEN)
        page.click("button:has-text('Log in')")
        assert page.url == f"{base}/periodic"
        click_through(page, base, periodic_app, tmp_path)
