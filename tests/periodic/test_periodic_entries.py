"""Periodic entries as the store keeps them (periodic/entry.py): each Celery schedule type
survives the JSON round trip with the same occurrences, and bad or crafted input is
refused with a ValueError that names the field."""

from __future__ import annotations

import contextlib
import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery.schedules import crontab, schedule, solar
from hypothesis import given, settings
from hypothesis import strategies as st

from celery_delayq.periodic.entry import PeriodicEntry

pytestmark = pytest.mark.unit

ANCHOR = datetime(2026, 3, 1, 8, 0, 7, tzinfo=timezone.utc)
LATER = datetime(2026, 3, 28, 12, tzinfo=timezone.utc)  # Berlin springs forward next day


def entry(**changes: Any) -> PeriodicEntry:
    values: dict[str, Any] = {
        "name": "report",
        "task": "shop.tasks.report",
        "schedule": timedelta(minutes=5),
        "anchor": ANCHOR,
        "timezone": "Europe/Berlin",
        **changes,
    }
    return PeriodicEntry(**values)


def first_times(periodic: PeriodicEntry, count: int) -> list[datetime]:
    times, moment = [], LATER
    for _ in range(count):
        found = periodic.occurrences().after(moment)
        assert found is not None
        times.append(moment := found)
    return times


SCHEDULES = [
    timedelta(minutes=5),
    90,
    2.5,
    schedule(timedelta(hours=1), relative=True),
    crontab(minute=30, hour=2),  # a fixed time: fires at 03:00 on the spring-forward day
    crontab(minute="*/15", hour="1-3"),  # follows real time: skips the gap
    crontab(minute=0, hour=[1, 2, 3], day_of_week="sun"),
    crontab(minute=0, hour=9, day_of_month="1-7", month_of_year="*/3"),
]


@pytest.mark.parametrize("when", SCHEDULES, ids=repr)
def test_each_schedule_type_reads_back_with_the_same_occurrences(when: Any) -> None:
    made = entry(schedule=when, args=(1, "two"), kwargs={"three": [3]}, options={"queue": "q"})
    back = PeriodicEntry.from_json(made.to_json())
    assert back.to_json() == made.to_json()
    assert first_times(back, 6) == first_times(made, 6)
    assert (back.args, back.kwargs, back.options) == ((1, "two"), {"three": [3]}, {"queue": "q"})


def test_a_solar_entry_reads_back() -> None:
    pytest.importorskip("ephem")
    made = entry(schedule=solar("sunset", 52.52, 13.405))
    back = PeriodicEntry.from_json(made.to_json())
    assert back.occurrences().after(LATER) == made.occurrences().after(LATER)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"name": ""}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"task": None}, "task"),
        ({"timezone": "Mars/Olympus_Mons"}, "time zone"),
        ({"timezone": "../../etc/passwd"}, "time zone"),
        ({"catch_up": "some"}, "catch_up"),
        ({"origin": "elsewhere"}, "origin"),
        ({"schedule": "every minute"}, "RFC 5545"),
        ({"schedule": object()}, "a schedule is"),
        ({"schedule": timedelta(0)}, "positive"),
        ({"args": "abc"}, "args"),
        ({"kwargs": {1: "one"}}, "kwargs"),
        ({"args": (object(),)}, "JSON"),
        ({"kwargs": {"ratio": float("nan")}}, "JSON"),
    ],
)
def test_bad_input_is_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        entry(**changes)


def test_a_naive_anchor_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        entry(anchor=datetime(2026, 1, 1))


@pytest.mark.parametrize(
    "crafted",
    [
        "",
        "[]",
        "{}",
        '{"name": "x"}',
        "not json",
        json.dumps({**json.loads(entry().to_json()), "anchor_ms": 1e400}),
        json.dumps({**json.loads(entry().to_json()), "schedule": {"crontab": {"minute": "99"}}}),
        json.dumps({**json.loads(entry().to_json()), "schedule": {"every": -1, "relative": 0}}),
        json.dumps({**json.loads(entry().to_json()), "schedule": {"solar": {"event": "noon"}}}),
        json.dumps({**json.loads(entry().to_json()), "args": {"a": 1}}),
    ],
)
def test_crafted_store_bytes_give_a_value_error(crafted: str) -> None:
    with pytest.raises(ValueError, match="not a periodic entry"):
        PeriodicEntry.from_json(crafted)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_no_bytes_make_reading_an_entry_fail_otherwise(crafted: bytes) -> None:
    with contextlib.suppress(ValueError):  # anything else fails the test
        PeriodicEntry.from_json(crafted)


def test_an_entrys_occurrences_are_those_of_the_entry_read_back() -> None:
    """The store keeps the anchor to the millisecond: the process that writes an entry
    and every beat that reads it back compute the same occurrences."""
    anchor = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
    written = PeriodicEntry("e", "t", 1.0, anchor, "UTC")
    read_back = PeriodicEntry.from_json(written.to_json())
    assert written.anchor == read_back.anchor
    assert written.occurrences().after(anchor) == read_back.occurrences().after(anchor)
