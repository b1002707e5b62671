"""A periodic entry's occurrences for each Celery schedule type (periodic/occurrences.py),
from an injected instant, never the wall clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab, schedule, solar

from celery_delayq.periodic.occurrences import Occurrences

pytestmark = pytest.mark.unit

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def test_an_interval_fires_one_interval_after_its_anchor_then_every_interval() -> None:
    every = Occurrences(timedelta(seconds=15), BERLIN, anchor=utc(2026, 6, 1, 10))
    assert every.after(utc(2026, 6, 1, 9)) == utc(2026, 6, 1, 10, 0, 15)
    assert every.after(utc(2026, 6, 1, 10)) == utc(2026, 6, 1, 10, 0, 15)
    assert every.after(utc(2026, 6, 1, 10, 0, 15)) == utc(2026, 6, 1, 10, 0, 30)
    assert every.after(utc(2026, 6, 1, 10, 0, 14, 999999)) == utc(2026, 6, 1, 10, 0, 15)
    # far from the anchor: computed, not walked
    assert every.after(utc(2126, 6, 1, 10, 0, 1)) == utc(2126, 6, 1, 10, 0, 15)


def test_every_interval_spelling_gives_the_same_times() -> None:
    anchor = utc(2026, 6, 1, 10, 0, 0, 250000)
    spellings = [30, 30.0, timedelta(seconds=30), schedule(timedelta(seconds=30))]
    times = [
        list(Occurrences(each, BERLIN, anchor).between(anchor, anchor + timedelta(minutes=2)))
        for each in spellings
    ]
    assert times[0] == [anchor + timedelta(seconds=30 * n) for n in range(1, 5)]
    assert all(each == times[0] for each in times)


def test_two_beats_name_the_same_occurrences_whenever_they_ask() -> None:
    """What makes leaderless scheduling possible: the times depend on the entry alone."""
    anchor = utc(2026, 3, 1, 8, 0, 7)
    first = Occurrences(timedelta(minutes=7), BERLIN, anchor)
    second = Occurrences(timedelta(minutes=7), BERLIN, anchor)
    late = utc(2026, 3, 29, 0, 59)  # across Berlin's spring forward at 01:00 UTC
    assert (
        list(first.between(late, late + timedelta(hours=2)))
        == list(second.between(anchor, late + timedelta(hours=2)))[-17:]
    )


def test_a_relative_interval_is_rounded_to_its_resolution_in_the_entrys_zone() -> None:
    # Celery's relative=True: an hourly entry created at 10:17 fires on the hour
    hourly = Occurrences(
        schedule(timedelta(hours=1), relative=True), BERLIN, utc(2026, 6, 1, 8, 17)
    )
    assert hourly.after(utc(2026, 6, 1, 8, 17)) == utc(2026, 6, 1, 9)
    # a daily one at local midnight: 22:00 UTC in Berlin's summer
    daily = Occurrences(schedule(timedelta(days=1), relative=True), BERLIN, utc(2026, 6, 1, 8))
    assert daily.after(utc(2026, 6, 1, 8)) == utc(2026, 6, 1, 22)


def test_an_interval_must_be_positive_and_a_schedule_known() -> None:
    with pytest.raises(ValueError, match="positive"):
        Occurrences(timedelta(0), BERLIN, utc(2026, 1, 1))
    with pytest.raises(TypeError, match="crontab, a solar"):
        Occurrences("every minute", BERLIN, utc(2026, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        Occurrences(10, BERLIN, datetime(2026, 1, 1))


def test_a_crontab_fires_in_the_entrys_zone_across_dst() -> None:
    hourly = Occurrences(crontab(minute=0), BERLIN, utc(2020, 1, 1))
    # 25 October 2026, Berlin's local day (22:00 to 23:00 UTC) has 25 hours: it falls back
    # at 01:00 UTC, and 02:00 local happens twice; an hourly entry fires at each
    day = list(hourly.between(utc(2026, 10, 24, 21, 30), utc(2026, 10, 25, 22, 30)))
    assert len(day) == 25 and day == [utc(2026, 10, 24, 22) + timedelta(hours=n) for n in range(25)]
    daily = Occurrences(crontab(minute=30, hour=2), BERLIN, utc(2020, 1, 1))
    # 29 March 2026: 02:30 does not exist in Berlin; it fires at 03:00 CEST (01:00 UTC)
    assert daily.after(utc(2026, 3, 28, 12)) == utc(2026, 3, 29, 1)


def test_a_solar_event_fires_when_the_almanac_says() -> None:
    pytest.importorskip("ephem")
    sunrise = Occurrences(solar("sunrise", 52.52, 13.405), BERLIN, utc(2020, 1, 1))
    # Berlin, 21 June 2026: sunrise at 04:43 CEST (02:43 UTC) by the almanacs
    first = sunrise.after(utc(2026, 6, 20, 12))
    assert first is not None and abs(first - utc(2026, 6, 21, 2, 43)) < timedelta(minutes=2)
    # strictly after: asked at the sunrise itself, the answer is the next day's
    following = sunrise.after(first)
    assert following is not None
    assert timedelta(hours=23, minutes=58) < following - first < timedelta(hours=24, minutes=2)


def test_a_sunrise_of_the_polar_night_is_the_first_after_it() -> None:
    pytest.importorskip("ephem")
    longyearbyen = Occurrences(solar("sunrise", 78.22, 15.65), BERLIN, utc(2020, 1, 1))
    found = longyearbyen.after(utc(2026, 12, 1))
    assert found is not None and utc(2027, 2, 10) < found < utc(2027, 2, 20)
