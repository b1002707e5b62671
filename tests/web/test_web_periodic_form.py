"""The periodic entry form (issue 36, section 4) through Flask's test client, against a real
Redis: a new entry of each kind previewed (its next five runs in its zone and in UTC,
nothing written) and saved; an entry of each kind edited through the form it fills in,
unchanged and changed; and each field the entry model refuses, said beside that field
with the model's own words, with nothing written. Pause with a note, remove, read-only,
CSRF and login: test_web_periodic_changes.py; in a browser:
test_web_periodic_edit_browser.py."""

from __future__ import annotations

import html
import json
import re
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo, available_timezones

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from celery_delayq import periodic

from ..helpers import PERIODIC_TASK as TASK
from .periodic_pages import error_beside, errors_said, form_fields, preview_runs
from .test_web import XSS, csrf_token, flashes, page_title

pytestmark = pytest.mark.integration

pytest.importorskip("flask")

BERLIN = ZoneInfo("Europe/Berlin")
#: A form for each kind of schedule, and the runs its preview shows: on the entry's
#: clocks, and in UTC. Each starts in 2030, so its runs are known now.
KINDS: dict[str, tuple[dict[str, str], list[tuple[str, str]]]] = {
    "interval": (
        {"kind": "interval", "every": "5400", "timezone": "Asia/Kolkata"},
        [
            ("Sat 2030-06-01 00:00:00 IST", "2030-05-31T18:30:00+00:00"),
            ("Sat 2030-06-01 01:30:00 IST", "2030-05-31T20:00:00+00:00"),
            ("Sat 2030-06-01 03:00:00 IST", "2030-05-31T21:30:00+00:00"),
            ("Sat 2030-06-01 04:30:00 IST", "2030-05-31T23:00:00+00:00"),
            ("Sat 2030-06-01 06:00:00 IST", "2030-06-01T00:30:00+00:00"),
        ],
    ),
    "crontab": (
        {"kind": "crontab", "cron": "30 9 * * mon-fri", "timezone": "Europe/Berlin"},
        [
            (f"{day} 2030-06-0{n} 09:30:00 CEST", f"2030-06-0{n}T07:30:00+00:00")
            for n, day in zip(range(3, 8), ["Mon", "Tue", "Wed", "Thu", "Fri"])
        ],
    ),
    "clocked": (
        {"kind": "clocked", "at": "2030-06-01T09:00", "timezone": "Europe/Berlin"},
        [("Sat 2030-06-01 09:00:00 CEST", "2030-06-01T07:00:00+00:00")],
    ),
    "rrule": (
        {
            "kind": "rrule",
            "rrule": "FREQ=WEEKLY;BYDAY=MO,FR;BYHOUR=17;BYMINUTE=15;BYSECOND=0",
            "timezone": "America/New_York",
        },
        [
            ("Mon 2030-06-03 17:15:00 EDT", "2030-06-03T21:15:00+00:00"),
            ("Fri 2030-06-07 17:15:00 EDT", "2030-06-07T21:15:00+00:00"),
            ("Mon 2030-06-10 17:15:00 EDT", "2030-06-10T21:15:00+00:00"),
            ("Fri 2030-06-14 17:15:00 EDT", "2030-06-14T21:15:00+00:00"),
            ("Mon 2030-06-17 17:15:00 EDT", "2030-06-17T21:15:00+00:00"),
        ],
    ),
}
#: The fields every form above shares: its start, on the entry's clocks.
COMMON = {"name": "nightly", "task": TASK, "start_time": "2030-06-01T00:00"}


def submit(client: Any, do: str, **fields: str) -> Any:
    """The entry form, as a browser submits it: its CSRF token, then ``fields``."""
    return client.post(
        "/periodic/save",
        data={"csrf_token": csrf_token(client, "/periodic/new"), "do": do, **fields},
    )


def stored(app: Celery) -> list[str]:
    """Every stored entry, as the store keeps it (its version and JSON)."""
    return [f"{info.version} {info.entry.to_json()}" for info in periodic.entries(app)]


def test_the_new_form_offers_each_kind_and_every_time_zone(client) -> None:
    page = client.get("/periodic")
    assert 'href="/periodic/new">New entry</a>' in page.get_data(as_text=True)
    form = client.get("/periodic/new")
    body = form.get_data(as_text=True)
    assert form.status_code == 200 and page_title(form) == "New periodic entry"
    for kind in KINDS:
        assert f'name="kind" value="{kind}"' in body
    zones = {zone for zone in available_timezones() if f"<option>{zone}</option>" in body}
    assert zones | {"UTC"} == available_timezones() | {"UTC"}
    fields = form_fields(form)
    assert fields["timezone"] == "UTC" and fields["kind"] == "interval"  # the app's zone
    assert (fields["catch_up"], fields["args"], fields["kwargs"]) == ("latest", "[]", "{}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.promise("web-periodic-preview")
def test_a_preview_shows_the_next_five_runs_in_its_zone_and_utc_and_writes_nothing(
    app, client, kind
) -> None:
    fields, runs = KINDS[kind]
    shown = submit(client, "preview", **COMMON, **fields)
    assert shown.status_code == 200 and errors_said(shown) == []
    assert preview_runs(shown) == runs
    assert f"<th>in {fields['timezone']}</th><th>UTC</th>" in shown.get_data(as_text=True)
    assert form_fields(shown)["name"] == "nightly"  # the form, as it was filled in
    assert stored(app) == []

    saved = submit(client, "save", **COMMON, **fields)
    assert saved.status_code == 302 and saved.location == "/periodic"
    assert flashes(client.get("/periodic")) == ["Added periodic entry &#39;nightly&#39;."]
    info = periodic.get(app, "nightly")
    assert info is not None and info.entry.timezone == fields["timezone"]
    assert [run.isoformat() for run in info.next_runs] == [iso for _, iso in runs][:3]


def test_save_keeps_every_field_the_form_gives(app, client) -> None:
    saved = submit(
        client,
        "save",
        name=XSS,
        task=TASK,
        kind="crontab",
        cron="0 3 1,15 * *",
        timezone="Europe/Berlin",
        args='[1, "two"]',
        kwargs='{"label": "☃"}',
        options='{"priority": 5}',
        catch_up="all",
        one_off="on",
        start_time="2030-06-01T00:00:00",
        expires="2031-01-01T00:00",
        description="  month's half  ",
        overlap="skip",
    )
    assert saved.status_code == 302
    info = periodic.get(app, XSS)
    assert info is not None
    entry = info.entry
    assert entry.schedule == crontab(minute=0, hour=3, day_of_month="1,15")
    assert (entry.task, entry.args, dict(entry.kwargs)) == (TASK, (1, "two"), {"label": "☃"})
    assert (dict(entry.options), entry.catch_up, entry.one_off) == ({"priority": 5}, "all", True)
    assert entry.start_time == datetime(2030, 6, 1, tzinfo=BERLIN)
    assert entry.expires == datetime(2031, 1, 1, tzinfo=BERLIN)
    assert entry.description == "month's half" and entry.enabled and entry.origin == "api"
    assert entry.overlap == "skip"
    assert XSS not in client.get("/periodic").get_data(as_text=True)  # shown as text


#: An entry of each kind the form edits, as the API makes it.
EDITED = {
    "interval": dict(schedule=schedule(90.5, relative=True), timezone="UTC"),
    "crontab": dict(schedule=crontab("0,30", "*/2", "mon-fri", "1-7", "1,6"), one_off=True),
    "clocked": dict(
        schedule=periodic.clocked(datetime(2030, 6, 1, 9, 0, 30, tzinfo=BERLIN)),
        timezone="Europe/Berlin",
    ),
    "rrule": dict(
        schedule="DTSTART:20300101T090000\nRRULE:FREQ=MONTHLY;BYDAY=-1FR;COUNT=12",
        timezone="Pacific/Chatham",
        expires=datetime(2031, 1, 1, tzinfo=timezone.utc),
        kwargs={"n": [1, {"deep": None}]},
        description="line one\nline two",
        overlap="skip",
    ),
}


@pytest.mark.parametrize("kind", EDITED)
@pytest.mark.promise("web-periodic-edit-keeps", "web-periodic-pause-note")
def test_an_entry_edited_through_its_form_unchanged_stays_as_it_was(app, client, kind) -> None:
    periodic.upsert(app, "edited", TASK, **EDITED[kind])
    periodic.pause(app, "edited", note="waiting for the migration")
    before = periodic.get(app, "edited")
    assert before is not None
    page = client.get(f"/periodic/edit?name={quote('edited')}")
    assert page.status_code == 200 and page_title(page) == "Edit periodic entry"
    fields = form_fields(page)
    assert fields["kind"] == kind and fields["entry"] == "edited"
    assert "waiting for the migration" in page.get_data(as_text=True)

    assert client.post("/periodic/save", data={**fields, "do": "save"}).status_code == 302
    after = periodic.get(app, "edited")
    assert after is not None and after.version > before.version
    assert after.entry == before.entry  # schedule, anchor, pause and note, all kept
    assert flashes(client.get("/periodic")) == ["Saved periodic entry &#39;edited&#39;."]


@pytest.mark.promise("web-periodic-edit-keeps", "web-periodic-pause-note")
def test_an_edit_changes_the_entry_from_its_next_run_and_keeps_its_pause(app, client) -> None:
    periodic.upsert(app, "edited", TASK, 3600, kwargs={"a": 1})
    periodic.pause(app, "edited", note="on hold")
    fields = form_fields(client.get("/periodic/edit?name=edited"))
    changed = {**fields, "kind": "crontab", "cron": "0 6 * * *", "kwargs": '{"a": 2}'}
    previewed = client.post("/periodic/save", data={**changed, "do": "preview"})
    assert len(preview_runs(previewed)) == 5 and "paused: it runs from its next" in (
        previewed.get_data(as_text=True)
    )
    assert client.post("/periodic/save", data={**changed, "do": "save"}).status_code == 302
    info = periodic.get(app, "edited")
    assert info is not None and info.entry.schedule == crontab(minute=0, hour=6)
    assert dict(info.entry.kwargs) == {"a": 2}
    assert (info.entry.enabled, info.entry.note) == (False, "on hold")


#: Each field the form may get wrong: what is typed, and what is said beside it (the
#: entry model's own words where it is the model that refuses it).
REFUSED = [
    ({"name": ""}, "name", "name must be non-empty text of at most 200 characters"),
    ({"name": "n" * 201}, "name", "name must be non-empty text of at most 200 characters"),
    ({"task": " "}, "task", "task must be non-empty text of at most 200 characters"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
    ({"timezone": "Europe"}, "timezone", "unknown time zone 'Europe'"),  # a folder
    ({"timezone": "Etc/" + "x" * 5000}, "timezone", "too long a name"),
    ({"kind": "sometimes"}, "kind", "pick one of interval, crontab, clocked, rrule"),
    ({"every": ""}, "every", "give the interval's interval"),
    ({"every": "soon"}, "every", "an interval is a number of seconds, not 'soon'"),
    ({"every": "inf"}, "every", "an interval is a finite number of seconds"),
    ({"every": "1e20"}, "every", "an interval is at most 86,400,000,000,000 seconds"),
    ({"every": "0"}, "every", "an interval must be positive, not 0:00:00"),
    ({"every": "0.5", "relative": "on"}, "every", "a relative interval must be at least 1"),
    ({"kind": "crontab", "cron": "0 3 * *"}, "cron", "a crontab is five fields"),
    ({"kind": "crontab", "cron": "61 * * * *"}, "cron", "Invalid end range: 61 > 59."),
    ({"kind": "crontab", "cron": "0 0 30 2 *"}, "cron", "never"),  # Celery words it by version
    ({"kind": "clocked", "at": "soon"}, "at", "a time is ISO 8601 (2030-06-01T09:00)"),
    ({"kind": "clocked", "at": "2001-01-01T00:00"}, "at", "it never fires in time zone UTC"),
    ({"kind": "rrule", "rrule": "FREQ=SOMETIMES"}, "rrule", "not an RFC 5545 rule"),
    ({"kind": "rrule", "rrule": "FREQ=DAILY;COUNT=100001"}, "rrule", "COUNT is at most 100,000"),
    ({"args": "[1,"}, "args", "not JSON: "),
    ({"args": '{"a": 1}'}, "args", "args must be a list or a tuple, not dict"),
    ({"args": "[" * 65 + "]" * 65}, "args", "JSON nested deeper than 64 levels"),
    ({"kwargs": '{"a":' * 65 + "1" + "}" * 65}, "kwargs", "JSON nested deeper than 64 levels"),
    ({"args": '["' + "x" * 200_000 + '"]'}, "args", "MessageTooLarge"),
    ({"kwargs": '{"x": "' + "x" * 200_000 + '"}'}, "kwargs", "MessageTooLarge"),
    ({"kwargs": "[1]"}, "kwargs", "kwargs must be a mapping with string keys"),
    ({"options": "[]"}, "options", "options must be a mapping"),
    ({"options": '{"countdown": 5}'}, "options", "options may not set eta or countdown"),
    ({"options": '{"queue": 5}'}, "options", "periodic entry 'nightly' refused: "),
    ({"catch_up": "sometimes"}, "catch_up", "catch_up must be one of latest, all, none"),
    ({"start_time": "1 June"}, "start_time", "a time is ISO 8601"),
    ({"expires": "2029-01-01T00:00"}, "expires", "expires must be after start_time"),
    ({"expires": "9999-12-31T23:59", "timezone": "Etc/GMT+12"}, "expires", "outside the years"),
    ({"start_time": "9999-12-31T23:59", "timezone": "Etc/GMT+12"}, "start_time", "outside the"),
    ({"kind": "clocked", "at": "9999-12-31T23:59", "timezone": "Etc/GMT+12"}, "at", "outside the"),
    ({"description": "d" * 1001}, "description", "description must be text of at most 1000"),
    ({"args": "[NaN]"}, "", "entry 'nightly' cannot be stored as JSON"),
]


@pytest.mark.parametrize("do", ["preview", "save"])
@pytest.mark.parametrize("typed, field, said", REFUSED)
@pytest.mark.promise("web-periodic-errors-beside-fields")
def test_a_refused_field_is_said_beside_it_and_nothing_is_written(
    app, client, do, typed, field, said
) -> None:
    fields = {**COMMON, "kind": "interval", "every": "60", **typed}
    answer = submit(client, do, **fields)
    assert answer.status_code == 400 and page_title(answer) == "New periodic entry"
    assert errors_said(answer) == [field]
    assert said in (error_beside(answer, field) or "")
    assert "Nothing was saved" in answer.get_data(as_text=True)
    assert preview_runs(answer) == [] and stored(app) == []
    kept = form_fields(answer)  # what was typed stays, to correct
    typed_in = {name: value for name, value in fields.items() if name not in ("kind", "catch_up")}
    assert {name: kept.get(name, "") for name in typed_in} == typed_in  # a browser sends no other


@pytest.mark.parametrize("do", ["preview", "save"])
@pytest.mark.promise("periodic-rrule-bounded")
def test_a_rule_that_never_fires_is_refused_beside_it(app, client, do) -> None:
    """30 February: dateutil would walk every second's day to the year 9999 (seconds)."""
    rule = "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30"
    answer = submit(client, do, **{**COMMON, "kind": "rrule", "rrule": rule})
    assert answer.status_code == 400 and errors_said(answer) == ["rrule"]
    assert "it never fires in time zone UTC" in (error_beside(answer, "rrule") or "")
    assert stored(app) == []


@pytest.mark.parametrize("do", ["preview", "save"])
def test_an_edit_refused_leaves_the_entry_as_it_was(app, client, do) -> None:
    periodic.upsert(app, "kept", TASK, 60)
    before = stored(app)
    fields = form_fields(client.get("/periodic/edit?name=kept"))
    answer = client.post("/periodic/save", data={**fields, "every": "-1", "do": do})
    assert answer.status_code == 400 and errors_said(answer) == ["every"]
    assert stored(app) == before


@pytest.mark.promise("web-periodic-errors-beside-fields")
def test_a_new_entry_may_not_take_the_name_of_another(app, client) -> None:
    periodic.upsert(app, "nightly", TASK, 60)
    before = stored(app)
    answer = submit(client, "save", **COMMON, kind="interval", every="30")
    assert answer.status_code == 400
    assert error_beside(answer, "name") == "an entry named 'nightly' exists: edit it from the list"
    assert stored(app) == before


def test_a_task_this_app_does_not_know_is_saved_with_a_warning(app, client) -> None:
    fields = {**COMMON, "task": "other.task", "kind": "interval", "every": "60"}
    assert submit(client, "save", **fields).status_code == 302
    said = flashes(client.get("/periodic"))
    assert said[0] == "Added periodic entry &#39;nightly&#39;."
    assert said[1].startswith("Periodic entry &#39;nightly&#39;: no task &#39;other.task&#39;")
    assert periodic.get(app, "nightly") is not None


def test_the_form_edits_an_entry_of_any_name(app, client) -> None:
    name = "line\r\nbreak\n and a NUL \x00 % %41 <b>"
    periodic.upsert(app, name, TASK, 60)
    (link,) = re.findall(r'href="(/periodic/edit[^"]*)"', client.get("/periodic").get_data(True))
    assert re.fullmatch(r"[A-Za-z0-9_.~/%?=+-]+", link), link  # nothing a browser changes
    form = client.get(html.unescape(link))
    assert form.status_code == 200 and "<b>" not in form.get_data(as_text=True)
    fields = form_fields(form)
    assert fields["entry"] == quote(name, safe="/")  # what a browser sends back unchanged
    answer = client.post("/periodic/save", data={**fields, "every": "120", "do": "save"})
    assert answer.status_code == 302
    info = periodic.get(app, name)
    assert info is not None and json.loads(info.entry.to_json())["schedule"]["every"] == 120


@pytest.mark.parametrize(
    "name, status, title",
    [
        ("nope", 404, "No periodic entry with that name"),
        ("x" * 10_000, 404, "No periodic entry with that name"),
        ("from settings", 409, "This entry is not edited here"),
        ("solar", 409, "This entry is not edited here"),
    ],
)
@pytest.mark.promise("web-periodic-edit-keeps")
def test_an_entry_the_form_cannot_edit_is_refused_clearly(app, client, name, status, title):
    periodic.upsert(app, "from settings", TASK, 60, origin="settings")
    periodic.upsert(app, "solar", TASK, solar("dawn_civil", 52, 13))
    before = stored(app)
    listed = client.get("/periodic").get_data(as_text=True)
    assert listed.count("/periodic/edit?") == 0 and listed.count('class="muted locked"') == 2
    answer = client.get(f"/periodic/edit?name={quote(name)}")
    assert answer.status_code == status and page_title(answer) == title
    form = {"entry": quote(name), "kind": "interval", "every": "5", "task": TASK}
    assert submit(client, "save", **form).status_code == status
    assert stored(app) == before
