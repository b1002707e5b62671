"""A periodic entry's occurrences for each Celery schedule type (periodic/occurrences.py),
from an injected instant, never the wall clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, _zoneinfo, available_timezones

import celery
import pytest
from celery.schedules import crontab, schedule, solar
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq.periodic import occurrences as occurrences_module
from celery_delayq.periodic.cron_times import offset_change
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


# --- schedule(every, relative=True): Celery's own times ----------------------------------

#: The times are Celery 5.7's, which adds elapsed time under a day and calendar days from a
#: day on; Celery 5.5 and 5.6 computed them differently across DST: with them (CI's oldest
#: dependencies), only zones without DST are compared.
CELERY_57 = celery.VERSION >= (5, 7)
STEADY_ZONES = ["UTC", "Asia/Kolkata", "Asia/Tokyo"]
DST_ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute DST
    "America/Santiago",  # its clocks jump at midnight
    "Asia/Tehran",  # at midnight too, until 2022
    "Pacific/Chatham",  # +12:45 / +13:45
]
ZONES = STEADY_ZONES + DST_ZONES if CELERY_57 else STEADY_ZONES
NAMED = [2.5, 1, 59.9, 60, 90, 3599, 3600, 5400, 86399, 86400, 129600, 2 * 86400 + 7]


def relative(seconds: float) -> schedule:
    return schedule(timedelta(seconds=seconds), relative=True)


def celery_runs(every: timedelta, zone: ZoneInfo, anchor: datetime, count: int) -> list[datetime]:
    """The runs Celery's beat makes: from each run, expressed in the zone as beat's
    ``app.now()`` is, ``schedule.remaining_estimate`` names the next (``now`` = the run)."""
    last = anchor.astimezone(zone)
    beat_schedule = schedule(every, relative=True, nowfun=lambda: last)
    found = []
    for _ in range(count):
        due = last.astimezone(UTC) + beat_schedule.remaining_estimate(last)
        found.append(due)
        last = due.astimezone(zone)
    return found


@cache
def transitions(zone: ZoneInfo, year: int) -> list[datetime]:
    """The instants of ``year`` at which ``zone``'s offset changes: daily probes, then
    halved to the second."""
    days = [utc(year, 1, 1) + timedelta(days=n) for n in range(367)]
    return [
        offset_change(zone, earlier, later)
        for earlier, later in zip(days, days[1:])
        if earlier.astimezone(zone).utcoffset() != later.astimezone(zone).utcoffset()
    ]


@st.composite
def chains(draw: st.DrawFn) -> tuple[timedelta, ZoneInfo, datetime]:
    """An interval, a zone and an anchor: at random, or a few intervals before a change
    of the zone's offset."""
    every = timedelta(seconds=draw(st.sampled_from(NAMED)))
    every = draw(st.one_of(st.just(every), st.timedeltas(timedelta(seconds=1), timedelta(days=3))))
    zone = ZoneInfo(draw(st.sampled_from(ZONES)))
    anchor = draw(st.datetimes(datetime(1990, 1, 1), datetime(2040, 1, 1), timezones=st.just(UTC)))
    changes = transitions(zone, anchor.year)
    if changes and draw(st.booleans()):
        anchor = draw(st.sampled_from(changes)) - every * draw(st.floats(0, 12))
    return every, zone, anchor.replace(microsecond=anchor.microsecond // 1000 * 1000)


@pytest.mark.promise("periodic-relative-as-celery")
@settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(chain=chains(), asked=st.integers(0, 29))
def test_a_relative_interval_runs_when_celerys_beat_would(
    chain: tuple[timedelta, ZoneInfo, datetime], asked: int
) -> None:
    every, zone, anchor = chain
    expected = celery_runs(every, zone, anchor, 30)
    runs = Occurrences(schedule(every, relative=True), zone, anchor)
    # asked far from the anchor first (jumped to), then run after run
    assert runs.after(expected[asked] - timedelta(microseconds=1)) == expected[asked]
    assert list(runs.between(anchor, expected[-1])) == expected


def test_under_a_minute_a_relative_interval_is_cut_to_the_second() -> None:
    anchor = utc(2026, 6, 1, 10, 0, 0, 700000)
    runs = list(
        Occurrences(relative(2.5), BERLIN, anchor).between(anchor, utc(2026, 6, 1, 10, 0, 8))
    )
    # 10:00:03.2 cut to 10:00:03, then 10:00:05.5 cut to 10:00:05...: every 2 seconds
    assert runs == [utc(2026, 6, 1, 10, 0, 3), utc(2026, 6, 1, 10, 0, 5), utc(2026, 6, 1, 10, 0, 7)]


@pytest.mark.parametrize(
    "seconds, anchor, expected",
    [
        # 90 s: cut to the minute, every minute
        (
            90,
            utc(2026, 6, 1, 10, 0, 20),
            [utc(2026, 6, 1, 10, 1) + timedelta(minutes=n) for n in range(4)],
        ),
        # 90 min: cut to the hour, hourly (12:17 CEST + 90 min = 13:47, run at 13:00 CEST)
        (
            5400,
            utc(2026, 6, 1, 10, 17),
            [utc(2026, 6, 1, 11) + timedelta(hours=n) for n in range(4)],
        ),
        # 36 h: cut to the local midnight, daily (22:00 UTC in Berlin's summer)
        (129600, utc(2026, 6, 1, 8), [utc(2026, 6, 1, 22) + timedelta(days=n) for n in range(4)]),
    ],
)
def test_a_relative_interval_is_cut_to_its_unit_each_run(
    seconds: int, anchor: datetime, expected: list[datetime]
) -> None:
    runs = Occurrences(relative(seconds), BERLIN, anchor)
    assert list(runs.between(anchor, expected[-1])) == expected


def test_a_relative_day_stays_at_local_midnight_across_dst() -> None:
    anchor = utc(2026, 3, 26, 10)
    runs = list(Occurrences(relative(86400), BERLIN, anchor).between(anchor, utc(2026, 4, 1)))
    # midnight CET (23:00 UTC), then after the spring forward of 29 March midnight CEST
    assert runs == [
        utc(2026, 3, 26, 23),
        utc(2026, 3, 27, 23),
        utc(2026, 3, 28, 23),
        utc(2026, 3, 29, 22),
        utc(2026, 3, 30, 22),
        utc(2026, 3, 31, 22),
    ]


def test_a_relative_day_whose_midnight_does_not_exist_runs_after_the_gap() -> None:
    santiago = ZoneInfo("America/Santiago")
    anchor = utc(2026, 9, 3, 12)
    runs = list(Occurrences(relative(86400), santiago, anchor).between(anchor, utc(2026, 9, 8, 12)))
    local = [run.astimezone(santiago).strftime("%d %H:%M %z") for run in runs]
    # 6 September: the clocks go from 00:00 -04 to 01:00 -03
    assert local == [
        "04 00:00 -0400",
        "05 00:00 -0400",
        "06 01:00 -0300",
        "07 00:00 -0300",
        "08 00:00 -0300",
    ]


def test_a_relative_hour_runs_every_real_hour_and_past_a_half_hour_fall_back() -> None:
    # Berlin's fall back: every real hour, 02:00 twice
    day = list(
        Occurrences(relative(3600), BERLIN, utc(2026, 10, 24, 20, 30)).between(
            utc(2026, 10, 24, 21, 30), utc(2026, 10, 25, 22, 30)
        )
    )
    assert day == [utc(2026, 10, 24, 22) + timedelta(hours=n) for n in range(25)]
    # Lord Howe falls back from 02:00 (+11) to 01:30 (+10:30): the run after 01:00 would
    # round back to 01:00, so it is the next hour, 02:00 (+10:30), an hour and a half later
    lord_howe = ZoneInfo("Australia/Lord_Howe")
    runs = list(
        Occurrences(relative(3600), lord_howe, utc(2026, 4, 4, 12, 30)).between(
            utc(2026, 4, 4, 12, 30), utc(2026, 4, 4, 17)
        )
    )
    assert runs == [
        utc(2026, 4, 4, 13),
        utc(2026, 4, 4, 14),
        utc(2026, 4, 4, 15, 30),
        utc(2026, 4, 4, 16, 30),
    ]


def test_a_relative_interval_years_after_its_anchor_is_jumped_to(monkeypatch) -> None:
    """The writer asks thousands of entries each pass: a chain is stepped run by run only
    across a change of the zone's offset, not from its anchor."""
    stepped: list[datetime] = []
    chain_class = occurrences_module._RelativeChain
    step = chain_class._step

    def counted(self: Any, last: datetime) -> datetime:
        stepped.append(last)
        return step(self, last)

    monkeypatch.setattr(chain_class, "_step", counted)
    anchor = utc(2016, 1, 1, 0, 0, 0, 300000)
    every_second = Occurrences(relative(1), BERLIN, anchor)
    assert every_second.after(utc(2026, 6, 1, 10, 0, 0, 500000)) == utc(2026, 6, 1, 10, 0, 1)
    assert len(stepped) < 100  # 21 changes of Berlin's offset, not 330 million seconds
    # 90 minutes: hourly, on the hour, every real hour (the 25th of October's 02:00 twice)
    ninety = Occurrences(relative(5400), BERLIN, anchor)
    fall_back = list(ninety.between(utc(2026, 10, 24, 23, 59), utc(2026, 10, 25, 3)))
    assert fall_back == [utc(2026, 10, 25, n) for n in range(4)]


def test_a_relative_interval_under_a_second_is_refused() -> None:
    # Celery cuts each run to the second: the next run would be the same second, for ever
    with pytest.raises(ValueError, match="at least 1 second"):
        Occurrences(relative(0.5), BERLIN, utc(2026, 1, 1))


def test_no_zone_changes_its_offset_twice_within_one_probe() -> None:
    """A relative chain finds the changes of its zone's offset by probing the offset every
    PROBE_SECONDS: it sees each change only if no two come closer. Each zone's table and
    its rule for the years after it, as the standard library's pure-Python zoneinfo reads
    them."""
    gaps = []
    for key in available_timezones():
        zone = _zoneinfo.ZoneInfo.no_cache(key)
        before = zone._tti_before.utcoff if zone._tti_before else None
        offsets = [before, *(each.utcoff for each in zone._ttinfos)]
        changes = [at for at, old, new in zip(zone._trans_utc, offsets, offsets[1:]) if old != new]
        gaps += [later - earlier for earlier, later in zip(changes, changes[1:])]
        if isinstance(zone._tz_after, _zoneinfo._TZStr):  # summer and winter time by rule
            start, end = zone._tz_after.transitions(2030)
            gaps += [abs(end - start), 365 * 86400 - abs(end - start)]
    assert min(gaps) >= occurrences_module.PROBE_SECONDS
