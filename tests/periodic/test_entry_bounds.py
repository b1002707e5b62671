"""The entry model django-celery-beat users expect (periodic/entry.py, schedules/): a one-off
``clocked`` time, ``one_off``, ``start_time``, ``expires`` and ``description``, kept in the
store's JSON beside the fields of before, so an entry stored earlier reads back the same;
and ``beat_schedule`` items that name them."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab

from celery_delayq.periodic.describe import entry_text, schedule_text
from celery_delayq.periodic.entry import PeriodicEntry, entry_from_settings, schedule_json
from celery_delayq.periodic.schedules.clocked import clocked
from celery_delayq.periodic.schedules.rrules import rrule_schedule

from .test_periodic_entries import ANCHOR, entry

pytestmark = pytest.mark.unit

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def times(periodic: PeriodicEntry, after: datetime, until: datetime) -> list[datetime]:
    return list(periodic.occurrences().between(after, until))


#: An entry as the store kept it before these fields existed (byte for byte, as written).
OLD_RECORD = (
    '{"anchor_ms": 1772352007000, "args": [1], "catch_up": "latest", "enabled": true, '
    '"kwargs": {}, "name": "report", "options": {"queue": "q"}, "origin": "api", '
    '"schedule": {"every": 300.0, "relative": false}, "task": "shop.tasks.report", '
    '"timezone": "Europe/Berlin"}'
)


def test_an_entry_stored_before_reads_back_the_same() -> None:
    old = PeriodicEntry.from_json(OLD_RECORD)
    assert (old.one_off, old.start_time, old.expires, old.description) == (False, None, None, "")
    assert old.overlap == "allow"
    assert old.to_json() == OLD_RECORD  # written again, it is the same record
    assert old == entry(args=(1,), options={"queue": "q"})
    assert times(old, ANCHOR, ANCHOR + timedelta(minutes=11)) == [
        ANCHOR + timedelta(minutes=5),
        ANCHOR + timedelta(minutes=10),
    ]


def test_the_new_fields_read_back() -> None:
    made = entry(
        schedule=crontab(minute=0, hour=9),
        one_off=True,
        start_time=datetime(2026, 4, 1, 0, 0, 0, 123456, tzinfo=BERLIN),
        expires=datetime(2026, 12, 31, tzinfo=BERLIN),
        description="the monthly report, ünïcödé\nsecond line",
    )
    back = PeriodicEntry.from_json(made.to_json())
    assert back == made and back.to_json() == made.to_json()
    assert made.start_time == utc(2026, 3, 31, 22, 0, 0, 123000)  # to the millisecond
    stored = json.loads(made.to_json())
    assert (stored["one_off"], stored["start_ms"], stored["expires_ms"]) == (
        True,
        1774994400123,
        1798671600000,
    )


@pytest.mark.parametrize(
    "schedule",
    [
        clocked(datetime(2026, 12, 1, 9, tzinfo=BERLIN)),
        rrule_schedule("FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0"),
        rrule_schedule("FREQ=MONTHLY;COUNT=3", datetime(2026, 4, 1, 9)),
        "RRULE:FREQ=DAILY;UNTIL=20261231T230000Z",
    ],
    ids=repr,
)
def test_clocked_and_rrule_schedules_read_back_with_the_same_occurrences(schedule) -> None:
    made = entry(schedule=schedule)
    back = PeriodicEntry.from_json(made.to_json())
    assert back.schedule == made.schedule and back.to_json() == made.to_json()
    assert times(back, ANCHOR, utc(2027, 1, 1)) == times(made, ANCHOR, utc(2027, 1, 1))
    assert times(made, ANCHOR, utc(2027, 1, 1))  # each fires


def test_a_clocked_entry_fires_once_at_its_time() -> None:
    once = entry(schedule=clocked(datetime(2026, 12, 1, 9, tzinfo=BERLIN)))
    assert json.loads(once.to_json())["schedule"] == {"clocked": 1796112000000}
    assert times(once, ANCHOR, utc(2030, 1, 1)) == [utc(2026, 12, 1, 8)]
    assert once.occurrences().after(utc(2026, 12, 1, 8)) is None  # then it has ended


def test_a_plain_datetime_is_no_schedule() -> None:
    with pytest.raises(ValueError, match=r"wrap it in clocked"):
        entry(schedule=datetime(2026, 12, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="aware"):
        clocked(datetime(2026, 12, 1))


def test_a_one_off_runs_its_first_occurrence_after_it_was_created_only() -> None:
    interval = entry(one_off=True)
    assert times(interval, ANCHOR - timedelta(days=1), utc(2027, 1, 1)) == [
        ANCHOR + timedelta(minutes=5)
    ]
    nightly = entry(schedule=crontab(minute=30, hour=2), one_off=True)
    assert times(nightly, ANCHOR, utc(2027, 1, 1)) == [utc(2026, 3, 2, 1, 30)]
    assert nightly.occurrences().after(utc(2026, 3, 2, 1, 30)) is None


def test_an_interval_with_a_start_time_first_runs_at_it_then_every_interval() -> None:
    """As django-celery-beat runs it: at its start time, then every interval from there."""
    start = datetime(2026, 4, 1, 9, 0, tzinfo=BERLIN)
    hourly = entry(schedule=timedelta(hours=1), start_time=start)
    assert times(hourly, ANCHOR, start + timedelta(hours=2)) == [
        start,
        start + timedelta(hours=1),
        start + timedelta(hours=2),
    ]


def test_no_occurrence_before_the_start_time_nor_after_expires() -> None:
    start, end = utc(2026, 4, 1, 7, 10), utc(2026, 4, 3, 7, 0)
    nightly = entry(schedule=crontab(minute=0, hour=9), start_time=start, expires=end)
    assert times(nightly, ANCHOR, utc(2027, 1, 1)) == [utc(2026, 4, 2, 7), utc(2026, 4, 3, 7)]
    assert nightly.occurrences().after(end) is None  # ended


def test_a_rule_with_no_start_starts_at_the_start_time() -> None:
    weekly = entry(schedule="FREQ=WEEKLY", start_time=datetime(2026, 4, 6, 9, tzinfo=BERLIN))
    assert times(weekly, ANCHOR, utc(2026, 4, 21)) == [
        utc(2026, 4, 6, 7),
        utc(2026, 4, 13, 7),
        utc(2026, 4, 20, 7),
    ]


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"start_time": datetime(2026, 4, 1)}, "start_time must be an aware"),
        ({"expires": "2026-04-01T00:00:00Z"}, "expires must be an aware"),
        ({"start_time": utc(2026, 5, 1), "expires": utc(2026, 4, 1)}, "after start_time"),
        ({"one_off": "yes"}, "one_off"),
        ({"description": "x" * 1001}, "description"),
        ({"description": None}, "description"),
        ({"overlap": "never"}, "overlap must be one of allow, skip"),
        ({"schedule": "every minute"}, "RFC 5545"),
    ],
)
def test_bad_bounds_are_refused_naming_the_field(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        entry(**changes)


@pytest.mark.parametrize(
    "crafted",
    [
        {"one_off": "yes"},
        {"start_ms": 1e400},
        {"expires_ms": "soon"},
        {"description": ["a"]},
        {"overlap": ["skip"]},
        {"overlap": None},
        {"schedule": {"clocked": "noon"}},
        {"schedule": {"rrule": "FREQ=NEVER", "dtstart": None}},
        {"schedule": {"rrule": "FREQ=DAILY", "dtstart": "2026-01-01T00:00:00+01:00"}},
    ],
)
def test_crafted_new_fields_give_a_value_error(crafted: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="not a periodic entry"):
        PeriodicEntry.from_json(json.dumps({**json.loads(OLD_RECORD), **crafted}))


def test_a_beat_schedule_item_takes_django_celery_beats_keys() -> None:
    made = entry_from_settings(
        "report",
        {
            "task": "shop.tasks.report",
            "schedule": clocked(datetime(2026, 12, 1, 9, tzinfo=BERLIN)),
            "one_off": True,
            "start_time": datetime(2026, 11, 1, tzinfo=BERLIN),
            "expires": datetime(2027, 1, 1, tzinfo=BERLIN),
            "description": "once",
            "options": {"expires": 60},  # each message's, in seconds, as in Celery
        },
        "Europe/Berlin",
        ANCHOR,
    )
    assert made.one_off and made.description == "once" and made.origin == "settings"
    assert made.expires == utc(2026, 12, 31, 23) and made.options == {"expires": 60}


def test_overlap_skip_is_kept_and_read_back_and_allow_is_stored_as_before() -> None:
    made = entry_from_settings(
        "sync", {"task": "shop.tasks.sync", "schedule": 60, "overlap": "skip"}, "UTC", ANCHOR
    )
    assert made.overlap == "skip"
    assert json.loads(made.to_json())["overlap"] == "skip"
    assert PeriodicEntry.from_json(made.to_json()).to_json() == made.to_json()
    assert "no overlap" in entry_text(made)
    assert "overlap" not in json.loads(entry(overlap="allow").to_json())


def test_a_number_as_a_beat_schedule_items_expires_is_refused_with_where_it_goes() -> None:
    with pytest.raises(ValueError, match=r"beat_schedule\['x'\]: expires is the entry's end"):
        entry_from_settings("x", {"task": "t", "schedule": 60, "expires": 60}, "UTC", ANCHOR)
    with pytest.raises(ValueError, match="unknown keys"):
        entry_from_settings("x", {"task": "t", "schedule": 60, "total_run_count": 1}, "UTC", ANCHOR)


@pytest.mark.parametrize(
    "schedule, text",
    [
        (
            clocked(datetime(2026, 12, 1, 9, tzinfo=BERLIN)),
            "once at 2026-12-01 09:00 Europe/Berlin",
        ),
        (rrule_schedule("FREQ=WEEKLY;BYDAY=MO"), "every week on Monday (rrule)"),
        (
            rrule_schedule("FREQ=MONTHLY;INTERVAL=2;BYDAY=-1FR;BYHOUR=9,17;BYMINUTE=30;COUNT=4"),
            "every 2 months on the last Friday at 09:30, 17:30 4 times (rrule)",
        ),
        (
            rrule_schedule("FREQ=YEARLY;BYMONTH=3;BYMONTHDAY=29;BYSETPOS=1", datetime(2026, 1, 1)),
            "every year in March on day 29 BYSETPOS=1 from 2026-01-01 00:00 Europe/Berlin (rrule)",
        ),
    ],
)
def test_a_schedule_of_ours_reads_in_words(schedule: Any, text: str) -> None:
    assert schedule_text(schedule_json(entry(schedule=schedule).schedule), "Europe/Berlin") == text


def test_an_entrys_bounds_read_in_words() -> None:
    bounded = entry(
        schedule=timedelta(hours=1),
        one_off=True,
        start_time=datetime(2026, 12, 1, 9, tzinfo=BERLIN),
        expires=datetime(2027, 1, 1, tzinfo=BERLIN),
    )
    assert entry_text(bounded) == (
        "every 1 hour; one-off (its first occurrence only); from 2026-12-01 09:00 "
        "Europe/Berlin; until 2027-01-01 00:00 Europe/Berlin"
    )
