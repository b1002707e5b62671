"""The dashboard's Periodic page (issue 28, point 5) through Flask's test client, against a
real Redis: each entry with its schedule, next runs, last run and missed occurrences, and
pause, resume and run now, which go the way of every dashboard action (a POST with its
CSRF token, a confirmation, then the change; refused read-only). Entry names are the
user's: crafted ones are shown as text and acted on like any other. In a browser:
tests/web/test_web_periodic_browser.py."""

from __future__ import annotations

import dataclasses
import html
import json
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, unquote
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.describe import schedule_text
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.periodic.records import OCCURRENCE_HEADER
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access
from celery_delayq.web.present import utc

from ..helpers import NOWHERE
from ..helpers import PERIODIC_TASK as TASK
from .test_web import XSS, csrf_token, flashes, page_title

pytestmark = pytest.mark.integration

pytest.importorskip("flask")

#: Names a user may give an entry: quotes, markup, the longest allowed, any script.
CRAFTED = [
    'it\'s "quoted" & <b>bold</b>',
    XSS,
    "n" * 200,
    "ünïcödé ☃ 名前 🚀",
    "a/../b?c=d&e=f#g %2F",
    "  padded  ",
    "line\r\nbreak\n and a NUL \x00 % %41",  # what a browser would change in a field
]
VERBS = ["pause", "resume", "run"]


def act(client: Any, verb: str, name: str, confirmed: bool = True, **form: Any) -> Any:
    """A row's form, submitted: its CSRF token and the entry's name; confirmed or not."""
    data = {"csrf_token": csrf_token(client, "/periodic"), "ids": [quote(name)], **form}
    if confirmed:
        data["confirmed"] = "yes"
    return client.post(f"/periodic/{verb}", data=data)


def row_names(response: Any) -> list[str]:
    """The entry names the rows' forms send (URL-quoted, as a browser reads them)."""
    found = re.findall(r'name="ids" value="([^"]*)"', response.get_data(as_text=True))
    return [unquote(html.unescape(name)) for name in found]


def confirmed_names(response: Any) -> list[str]:
    """The names a confirmation lists, as a browser shows them."""
    found = re.findall(r"<li><code>(.*?)</code></li>", response.get_data(as_text=True), re.S)
    return [html.unescape(name) for name in found]


def late_missed(row: str) -> tuple[str, ...]:
    """A row's counts of occurrences run late and missed."""
    found = re.search(r'<span class="(?:warn)?">(\d+)</span> / <span class="(?:warn)?">(\d+)<', row)
    assert found, row
    return found.groups()


def enabled(app: Celery, name: str) -> bool:
    info = periodic.get(app, name)
    assert info is not None, name
    return info.entry.enabled


def queued(app: Celery, redis_client: Any) -> list[dict[str, Any]]:
    """The messages in the app's queue now (a run now lands there at once)."""
    raw = redis_client.lrange(app.conf.task_default_queue, 0, -1)
    return [json.loads(each) for each in raw]


def test_the_page_lists_each_entry_with_its_runs_and_missed_occurrences(app, client) -> None:
    periodic.upsert(
        app,
        "nightly",
        TASK,
        crontab(minute=0, hour=3, day_of_week="mon-fri"),
        timezone="Europe/Berlin",
    )
    periodic.upsert(app, "tick", TASK, 60)
    periodic.upsert(app, "quiet", TASK, timedelta(hours=2), enabled=False)
    occurrence = datetime(2026, 11, 27, 2, 0, tzinfo=timezone.utc)
    started = occurrence + timedelta(seconds=1.5)
    with open_store(app) as store:
        history = EntryHistory(store.client, store.keys)
        history.ran("nightly", occurrence, started)
        history.count("nightly", late=1, missed=0)
        history.count("tick", late=0, missed=7)

    response = client.get("/periodic")
    body = response.get_data(as_text=True)

    assert response.status_code == 200 and page_title(response) == "Periodic"
    assert '<a href="/periodic" class="here">Periodic</a>' in body  # the nav link
    assert "3 entries" in body and row_names(response) == ["nightly", "quiet", "tick"]
    rows = {name: row for name, row in zip(["nightly", "quiet", "tick"], body.split("<tr>")[2:])}
    nightly = rows["nightly"]
    assert f'href="/scheduled?task={TASK}"' in nightly
    assert "crontab 0 3 * * mon-fri" in nightly and "Europe/Berlin" in nightly
    assert "enabled" in nightly and ">api<" in nightly
    info = periodic.get(app, "nightly")
    assert info is not None and len(info.next_runs) == 3
    for run in info.next_runs:  # the next three runs, UTC
        assert f'<time datetime="{run.isoformat()}">{utc(run)}</time>' in nightly
    assert "2026-11-27 02:00:00" in nightly and "started 2026-11-27 02:00:01" in nightly
    assert late_missed(nightly) == ("1", "0")

    assert "every 1 minute" in rows["tick"] and rows["tick"].count("<time ") == 3
    assert late_missed(rows["tick"]) == ("0", "7")
    assert "none recorded" in rows["tick"]
    quiet = rows["quiet"]
    assert "every 2 hours" in quiet and "paused" in quiet and "none: paused" in quiet
    assert ">Resume</button>" in quiet and ">Pause</button>" not in quiet


def test_no_entry_yet_says_how_to_add_one(client) -> None:
    body = client.get("/periodic").get_data(as_text=True)
    assert "0 entries" in body and "No periodic entry yet" in body


@pytest.mark.parametrize(
    "schedule, text",
    [
        ({"every": 30.0, "relative": False}, "every 30 seconds"),
        ({"every": 1.0, "relative": False}, "every 1 second"),
        ({"every": 0.5, "relative": True}, "every 0.5 seconds (relative)"),
        ({"every": 300.0, "relative": False}, "every 5 minutes"),
        ({"every": 90.0, "relative": False}, "every 90 seconds"),
        ({"every": 86400.0, "relative": False}, "every 1 day"),
        (
            {
                "crontab": {
                    "minute": [0, 30],
                    "hour": "*/2",
                    "day_of_month": "*",
                    "month_of_year": 1,
                    "day_of_week": "*",
                }
            },
            "crontab 0,30 */2 * 1 *",
        ),
        ({"solar": {"event": "sunrise", "lat": 52.5, "lon": 13.4}}, "solar sunrise at 52.5, 13.4"),
    ],
)
def test_a_schedule_reads_in_words(schedule: dict[str, Any], text: str) -> None:
    assert schedule_text(schedule) == text


def test_pause_and_resume_ask_first_then_change_the_entry(app, client) -> None:
    periodic.upsert(app, "tick", TASK, 60)

    asked = act(client, "pause", "tick", confirmed=False)
    assert asked.status_code == 200 and page_title(asked) == "Pause 1 periodic entry?"
    assert confirmed_names(asked) == ["tick"]
    assert enabled(app, "tick")  # nothing changed yet

    done = act(client, "pause", "tick")
    assert done.status_code == 302 and done.location == "/periodic"
    page = client.get("/periodic")
    assert flashes(page) == ["Paused periodic entry &#39;tick&#39;."]
    assert not enabled(app, "tick") and ">Resume</button>" in page.get_data(as_text=True)
    assert periodic.get(app, "tick").next_runs == []  # type: ignore[union-attr]

    asked = act(client, "resume", "tick", confirmed=False)
    assert page_title(asked) == "Resume 1 periodic entry?" and not enabled(app, "tick")
    assert act(client, "resume", "tick").status_code == 302
    assert flashes(client.get("/periodic")) == ["Resumed periodic entry &#39;tick&#39;."]
    assert enabled(app, "tick") and len(periodic.get(app, "tick").next_runs) == 3  # type: ignore[union-attr]


def test_run_now_asks_first_then_sends_one_extra_occurrence(app, client, redis_client) -> None:
    periodic.upsert(app, "tick", TASK, 3600, kwargs={"label": "now"})
    version = periodic.get(app, "tick").version  # type: ignore[union-attr]

    asked = act(client, "run", "tick", confirmed=False)
    assert page_title(asked) == "Run now 1 periodic entry?"
    assert queued(app, redis_client) == []

    assert act(client, "run", "tick").status_code == 302
    (message,) = queued(app, redis_client)
    task_id = message["headers"]["id"]
    assert message["headers"]["task"] == TASK and message["headers"][OCCURRENCE_HEADER]
    assert flashes(client.get("/periodic")) == [
        f"Sent an extra run of periodic entry &#39;tick&#39; (task {task_id})."
    ]
    info = periodic.get(app, "tick")  # its schedule is as it was
    assert info is not None and info.version == version and info.entry.enabled


@pytest.mark.parametrize("verb", ["resume", "run"])
def test_an_entry_that_cannot_be_sent_is_refused_with_its_reason_not_a_500(
    app, client, redis_client, verb
) -> None:
    """An entry stored unchecked (by other code, or a hand) whose message cannot be built:
    resume and run now refuse it and say why; the page and the other entries go on."""
    periodic.upsert(app, "tick", TASK, 3600)
    with open_store(app) as store:
        registry = EntryRegistry(store.client, store.keys)
        found = registry.get("tick")
        assert found is not None
        registry.put(dataclasses.replace(found.entry, name="broken", options={"queue": 5}))
    periodic.pause(app, "broken")

    done = act(client, verb, "broken")
    assert done.status_code == 302
    (said,) = flashes(client.get("/periodic"))
    assert said.startswith("Refused periodic entry &#39;broken&#39; (") and "refused" in said
    assert queued(app, redis_client) == []
    info = periodic.get(app, "broken")
    assert info is not None and not info.entry.enabled
    assert act(client, "run", "tick").status_code == 302
    assert len(queued(app, redis_client)) == 1


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("token", [None, "forged", "another app's"])
@pytest.mark.promise("security-web-csrf", "web-actions-need-csrf")
def test_a_post_without_its_csrf_token_changes_nothing(
    app, client, redis_client, verb, token
) -> None:
    periodic.upsert(app, "tick", TASK, 60, enabled=verb != "resume")
    data = {"ids": ["tick"], "confirmed": "yes"}
    if token == "another app's":  # a real token, signed with another secret key
        data["csrf_token"] = csrf_token(create_app(app, access=Access()).test_client(), "/periodic")
    elif token:
        data["csrf_token"] = token
    response = client.post(f"/periodic/{verb}", data=data)
    assert response.status_code == 400
    assert page_title(response) == "The form could not be checked"
    assert enabled(app, "tick") == (verb != "resume") and queued(app, redis_client) == []


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.promise("security-web-csrf", "web-actions-need-csrf")
def test_an_action_is_a_post_never_a_get(app, client, redis_client, verb) -> None:
    periodic.upsert(app, "tick", TASK, 60, enabled=verb != "resume")
    assert client.get(f"/periodic/{verb}?ids=tick&confirmed=yes").status_code == 405
    assert enabled(app, "tick") == (verb != "resume") and queued(app, redis_client) == []


@pytest.mark.promise("security-web-read-only", "web-read-only-refuses-actions")
def test_read_only_shows_the_entries_and_refuses_every_action(app, redis_client) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    periodic.upsert(app, "quiet", TASK, 60, enabled=False)
    client = create_app(app, read_only=True, access=Access()).test_client()
    body = client.get("/periodic").get_data(as_text=True)
    assert "tick" in body and "quiet" in body and "read-only" in body
    assert 'name="ids"' not in body and "<button" not in body.split("</header>")[1]
    token = csrf_token(client, "/login")
    for verb, name in (("pause", "tick"), ("resume", "quiet"), ("run", "tick")):
        response = client.post(
            f"/periodic/{verb}", data={"ids": [name], "confirmed": "yes", "csrf_token": token}
        )
        assert response.status_code == 403, verb
        assert "read-only" in response.get_data(as_text=True)
    assert enabled(app, "tick") and not enabled(app, "quiet") and queued(app, redis_client) == []


@pytest.mark.parametrize("name", CRAFTED)
@pytest.mark.promise("web-values-escaped")
def test_a_crafted_name_is_shown_as_text_and_acted_on(app, client, redis_client, name) -> None:
    periodic.upsert(app, name, TASK, 60)
    page = client.get("/periodic")
    body = page.get_data(as_text=True)
    assert "<script>" not in body and "<b>" not in body
    assert row_names(page) == [name]  # the form sends back the name, whole
    (sent,) = re.findall(r'name="ids" value="([^"]*)"', body)
    assert re.fullmatch(r"[A-Za-z0-9_.~/%&#;-]+", sent), sent  # nothing a browser changes

    asked = act(client, "pause", row_names(page)[0], confirmed=False)
    shown = asked.get_data(as_text=True)
    assert asked.status_code == 200 and "<script>" not in shown and "<b>" not in shown
    assert row_names(asked) == [name] and confirmed_names(asked) == [name]
    assert enabled(app, name)

    assert act(client, "pause", row_names(asked)[0]).status_code == 302
    assert not enabled(app, name)
    assert act(client, "resume", name).status_code == 302 and enabled(app, name)
    assert act(client, "run", name).status_code == 302
    assert len(queued(app, redis_client)) == 1
    after = client.get("/periodic")
    assert "<script>" not in after.get_data(as_text=True)
    (said,) = [html.unescape(text) for text in flashes(after)]
    assert said.startswith(f"Sent an extra run of periodic entry {name!r} (task ")


def test_a_crafted_task_name_is_quoted_in_its_link(app, client) -> None:
    task = 'tasks.x&q=<b>"hi"</b> ☃'
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "odd", task, 60)
    body = client.get("/periodic").get_data(as_text=True)
    assert "<b>" not in body
    assert 'href="/scheduled?task=tasks.x%26q%3D%3Cb%3E%22hi%22%3C/b%3E+%E2%98%83"' in body


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("confirmed", [False, True])
def test_an_unknown_name_is_a_clear_404(app, client, redis_client, verb, confirmed) -> None:
    periodic.upsert(app, "tick", TASK, 60, enabled=verb != "resume")
    for name in ("nope", "tick ", "x" * 10_000):
        response = act(client, verb, name, confirmed=confirmed)
        assert response.status_code == 404, name
        assert page_title(response) == "No periodic entry with that name"
    both = client.post(  # one unknown name among known ones: nothing is done
        f"/periodic/{verb}",
        data={"ids": ["tick", "nope"], "confirmed": "yes", "csrf_token": csrf_token(client)},
    )
    assert both.status_code == 404
    assert enabled(app, "tick") == (verb != "resume") and queued(app, redis_client) == []


def test_an_unknown_verb_no_name_or_all_is_refused(app, client) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    assert act(client, "delete", "tick").status_code == 404
    token = csrf_token(client)
    for form, title in (
        ({}, "Nothing selected"),
        ({"scope": "all"}, "Nothing selected"),
        ({"ids": [str(n) for n in range(101)]}, "Too many entries"),
    ):
        response = client.post("/periodic/pause", data={"csrf_token": token, **form})
        assert response.status_code == 400 and page_title(response) == title
    assert enabled(app, "tick")


@pytest.mark.promise("web-redis-outage-503")
def test_redis_out_of_reach_is_a_clear_503_at_once(make_app) -> None:
    app = make_app(url=NOWHERE, broker_connection_retry=False, broker_connection_max_retries=0)
    started = time.monotonic()
    response = create_app(app, access=Access()).test_client().get("/periodic")
    assert response.status_code == 503 and time.monotonic() - started < 5
    assert page_title(response) == "The delayed store is unreachable"


def test_without_credentials_the_page_and_its_actions_are_refused(app) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    client = create_app(app, access=Access("ops", "pa55word")).test_client()
    assert client.get("/periodic").status_code == 401
    form = {"ids": ["tick"], "confirmed": "yes", "csrf_token": csrf_token(client, "/login")}
    response = client.post("/periodic/pause", data=form)  # a valid token, but no login
    assert response.status_code == 401 and enabled(app, "tick")


@pytest.mark.promise("periodic-total-run-count", "periodic-description")
def test_the_page_shows_the_entry_model_in_words_and_the_runs_counted(app, client) -> None:
    """A clocked one-off, an rrule between a start time and its expiry, a description (as
    text), each entry's runs counted, and an entry that has ended."""
    launch = datetime(2030, 6, 1, 9, tzinfo=ZoneInfo("Europe/Berlin"))
    periodic.upsert(
        app, "launch", TASK, periodic.clocked(launch), timezone="Europe/Berlin", description=XSS
    )
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    periodic.upsert(
        app,
        "mondays",
        TASK,
        "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0",
        start_time=start,
        expires=start + timedelta(days=30),
    )
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    periodic.upsert(app, "soon", TASK, periodic.clocked(soon))
    with open_store(app) as store:
        history = EntryHistory(store.client, store.keys)
        for minute in (1, 2, 2, 3):  # a retry of the second: counted once
            history.ran("mondays", start + timedelta(minutes=minute), start)
    with open_store(app) as store:  # "soon" ran, and has ended since
        raw = store.client.hget(store.keys.periodic_entries, "soon").decode()
        version, _, body = raw.partition(" ")
        ended = json.loads(body)
        ended["schedule"] = {"clocked": 1_000}
        store.client.hset(store.keys.periodic_entries, "soon", f"{version} {json.dumps(ended)}")

    body = client.get("/periodic").get_data(as_text=True)
    rows = dict(zip(["launch", "mondays", "soon"], body.split("<tr>")[2:]))
    assert "once at 2030-06-01 09:00 Europe/Berlin" in rows["launch"]
    assert "&lt;script&gt;" in rows["launch"] and XSS not in body  # the description, as text
    assert (
        "every week on Monday at 09:00 (rrule); from 2030-01-01 00:00 UTC; "
        "until 2030-01-31 00:00 UTC" in rows["mondays"]
    )
    assert (
        '<td class="num">3</td>' in rows["mondays"] and '<td class="num">0</td>' in rows["launch"]
    )
    assert "none: ended" in rows["soon"]
