"""celery_delayq.periodic.cron_times: a crontab's firings across the real 2026 DST transitions.

Every instant is given (an injected clock): nothing reads the wall clock. The property test
compares each generated crontab's firings over a whole year with an oracle, a brute-force
walk minute by minute in UTC that applies the rules literally.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from celery.schedules import crontab
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq.periodic.cron_times import (
    CronFields,
    follows_real_time,
    next_occurrence,
    occurrences,
)

pytestmark = pytest.mark.unit

UTC = timezone.utc
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",  # a 30-minute shift
    "Pacific/Chatham",  # +12:45 / +13:45
    "Antarctica/Troll",  # a 2-hour shift
    "America/Santiago",  # shifts at midnight
    "Asia/Kolkata",  # +05:30, no DST
]
#: The compared year, with a margin that covers 2026's transitions in every zone.
AFTER = datetime(2025, 12, 31, tzinfo=UTC)
UNTIL = datetime(2027, 1, 2, tzinfo=UTC)
#: The oracle's walk starts earlier, so that it has seen the wall times before AFTER.
WALK_START = datetime(2025, 12, 28, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WALK_MINUTES = (UNTIL - WALK_START) // MINUTE + 1


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def fields_of(text: str) -> CronFields:
    """CronFields from a crontab line, 'minute hour day-of-month month day-of-week'."""
    minute, hour, day_of_month, month, day_of_week = text.split()
    return CronFields.from_crontab(
        crontab(minute, hour, day_of_week, day_of_month, month)  # Celery's argument order
    )


def between(text: str, zone: str, after: datetime, until: datetime) -> list[datetime]:
    return list(occurrences(fields_of(text), ZoneInfo(zone), after, until))


# --- the oracle ------------------------------------------------------------------------------

#: Local wall times are counted in minutes from this naive instant (before any zone's walk).
EPOCH = datetime(2025, 12, 27)


@dataclass(frozen=True)
class Walk:
    """One zone's year, minute by minute in UTC: each minute's local wall time (in minutes
    from EPOCH), whether that wall time was seen before (a fall-back repeat), and the local
    minutes skipped just before it (a spring-forward gap)."""

    walls: list[int]
    repeated: list[bool]
    skipped: dict[int, range]


@cache
def walk(zone_name: str) -> Walk:
    """Computed once per zone and session (2026's offsets are all whole minutes)."""
    zone = ZoneInfo(zone_name)
    start = (WALK_START.replace(tzinfo=None) - EPOCH) // MINUTE  # WALK_START as if UTC were local
    walls: list[int] = []
    repeated: list[bool] = []
    skipped: dict[int, range] = {}
    seen: set[int] = set()
    previous = start - 1 + (WALK_START - MINUTE).astimezone(zone).utcoffset() // MINUTE
    moment = WALK_START
    for index in range(WALK_MINUTES):
        wall = start + index + moment.astimezone(zone).utcoffset() // MINUTE
        if wall > previous + 1:
            skipped[index] = range(previous + 1, wall)
        walls.append(wall)
        repeated.append(wall in seen)
        seen.add(wall)
        previous = wall
        moment += MINUTE
    return Walk(walls, repeated, skipped)


def oracle(fields: CronFields, zone_name: str) -> list[datetime]:
    """The rules, literally: real-time entries fire at every minute whose wall time matches;
    fixed ones skip a repeated wall time and fire at a gap's end if a skipped minute matched."""
    year = walk(zone_name)
    matches = matcher(fields, days=max(year.walls) // 1440 + 1)
    fires = [matches(wall) for wall in year.walls]
    if not fields.follows_real_time:
        fires = [match and not again for match, again in zip(fires, year.repeated)]
        for index, gap in year.skipped.items():
            fires[index] = fires[index] or any(matches(wall) for wall in gap)
    firings = [WALK_START + index * MINUTE for index, fire in enumerate(fires) if fire]
    return [instant for instant in firings if AFTER < instant <= UNTIL]


def matcher(fields: CronFields, days: int) -> Callable[[int], bool]:
    """Whether a local wall time (minutes from EPOCH) matches every field: its day matches
    the day of the month, the month and the weekday, and its time of day the hour and the
    minute. Each day's and each time of day's answer is worked out once."""
    day_ok = []
    for number in range(days):
        day = EPOCH + timedelta(days=number)
        day_ok.append(
            day.day in fields.days_of_month
            and day.month in fields.months
            and day.isoweekday() % 7 in fields.days_of_week
        )
    time_ok = [t // 60 in fields.hours and t % 60 in fields.minutes for t in range(1440)]
    return lambda wall: day_ok[wall // 1440] and time_ok[wall % 1440]


# --- generated crontabs ------------------------------------------------------------------------


def _field(low: int, high: int, likely: list[int]) -> st.SearchStrategy[str]:
    """A crontab field's text: '*', '*/n', a list, a range, or a stepped range."""
    number = st.sampled_from(likely) | st.integers(low, high)
    a_list = st.lists(number, min_size=1, max_size=4, unique=True).map(
        lambda values: ",".join(map(str, sorted(values)))
    )
    a_range = st.tuples(number, number).map(lambda ab: f"{min(ab)}-{max(ab)}")
    stepped = st.tuples(number, number, st.integers(1, high - low)).map(
        lambda abn: f"{min(abn[:2])}-{max(abn[:2])}/{abn[2]}"
    )
    every_n = st.integers(1, high - low).map(lambda n: f"*/{n}")
    return st.one_of(st.just("*"), every_n, a_list, a_range, stepped)


#: Biased towards the wall times the transitions touch (00:00-03:59, minutes 0/15/30/45).
MINUTES = _field(0, 59, [0, 15, 30, 45, 59])
HOURS = _field(0, 23, [0, 1, 2, 3, 23])
#: Mostly every day, so that the transition days stay in play.
DAYS = st.sampled_from(["*", "*", "*", "*/2", "1-10", "4,5,25-29", "31"])
MONTHS = st.sampled_from(["*", "*", "*", "3,4", "9-11", "*/2", "2"])
WEEKDAYS = st.sampled_from(["*", "*", "*", "sun", "sat,sun", "mon-fri", "0,6"])


@st.composite
def crontab_lines(draw: st.DrawFn) -> str:
    line = " ".join(draw(field) for field in (MINUTES, HOURS, DAYS, MONTHS, WEEKDAYS))
    if line.split()[2:4] == ["31", "2"]:  # never matches: refused (tested apart)
        line = line.replace(" 31 ", " 28 ")
    return line


def check_against_oracle(zone: str, line: str) -> None:
    fields = fields_of(line)
    assert list(occurrences(fields, ZoneInfo(zone), AFTER, UNTIL)) == oracle(fields, zone)


PROPERTY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("zone", ZONES)
@settings(PROPERTY, max_examples=4)
@given(line=crontab_lines())
def test_a_year_of_firings_equals_the_oracle(zone: str, line: str) -> None:
    check_against_oracle(zone, line)


@pytest.mark.slow
@pytest.mark.parametrize("zone", ZONES)
@settings(PROPERTY, max_examples=30)
@given(line=crontab_lines())
def test_a_year_of_firings_equals_the_oracle_many(zone: str, line: str) -> None:
    check_against_oracle(zone, line)


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize(
    "line",
    [
        "0 * * * *",  # hourly (celery#10107)
        "*/15 * * * *",
        "30 2 * * *",  # daily, inside New York's and Berlin's gaps
        "0,15,30,45 0-3 * * *",  # fixed times across every zone's transitions
        "30 1,2 * * *",  # Troll's 2-hour gap and repeat
        "45 1-3/1 * * *",  # a stepped hour: real time
        "0-59/5 2 * * *",  # a stepped minute, a fixed hour: fixed
        "0 0 * * *",  # Santiago's midnight shifts
    ],
)
def test_chosen_crontabs_equal_the_oracle(zone: str, line: str) -> None:
    check_against_oracle(zone, line)


# --- hand-written regressions ----------------------------------------------------------------


def test_hourly_fires_every_real_hour_across_fall_back_celery_10107() -> None:
    day = between("0 * * * *", "America/New_York", utc(2026, 11, 1, 3, 59), utc(2026, 11, 2, 4))
    assert len(day) == 25  # 1 a.m. twice
    assert day == [utc(2026, 11, 1, 4) + timedelta(hours=n) for n in range(25)]
    local = [instant.astimezone(ZoneInfo("America/New_York")).hour for instant in day[:4]]
    assert local == [0, 1, 1, 2]


def test_hourly_fires_every_real_hour_across_spring_forward() -> None:
    day = between("0 * * * *", "America/New_York", utc(2026, 3, 8, 4, 59), utc(2026, 3, 9, 3, 59))
    assert day == [utc(2026, 3, 8, 5) + timedelta(hours=n) for n in range(23)]  # 2 a.m. skipped


def test_daily_inside_the_gap_fires_once_at_its_end() -> None:
    runs = between("30 2 * * *", "America/New_York", utc(2026, 3, 7), utc(2026, 3, 10))
    # 02:30 EST, then 03:00 EDT (the gap's end), then 02:30 EDT
    assert runs == [utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7), utc(2026, 3, 9, 6, 30)]


def test_daily_in_the_repeated_hour_fires_once_at_the_first() -> None:
    runs = between("30 1 * * *", "America/New_York", utc(2026, 10, 31), utc(2026, 11, 3))
    # 01:30 EDT twice, and not 01:30 EST on the day it recurs
    assert runs == [utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)]


def test_lord_howe_half_hour_gap_and_repeat() -> None:
    zone = "Australia/Lord_Howe"
    # 4 October: 02:00 (+10:30) becomes 02:30 (+11) at 15:30 UTC the day before
    assert between("15 2 4 10 *", zone, utc(2026, 1, 1), utc(2027, 1, 1)) == [
        utc(2026, 10, 3, 15, 30)
    ]
    # 5 April: 02:00 (+11) becomes 01:30 (+10:30); 01:45 first happens at 14:45 UTC
    assert between("45 1 5 4 *", zone, utc(2026, 1, 1), utc(2027, 1, 1)) == [
        utc(2026, 4, 4, 14, 45)
    ]
    assert between("45 * 5 4 *", zone, utc(2026, 4, 4, 14), utc(2026, 4, 4, 16)) == [
        utc(2026, 4, 4, 14, 45),
        utc(2026, 4, 4, 15, 15),  # 01:45 again, at +10:30
    ]


def test_chatham_gap_collapses_minutes_into_one_firing_at_its_end() -> None:
    # 27 September: 02:45 (+12:45) becomes 03:45 (+13:45) at 14:00 UTC. 03:00, 03:15 and
    # 03:30 do not exist, and 03:45 is the gap's end: one firing there, then four a day.
    runs = between("0,15,30,45 3 * * *", "Pacific/Chatham", utc(2026, 9, 26), utc(2026, 9, 28))
    assert runs == [
        utc(2026, 9, 26, 14),
        *(utc(2026, 9, 27, 13, 15) + timedelta(minutes=15 * n) for n in range(4)),
    ]
    # the same entry, following real time, only fires at 03:45 that day
    real = between(
        "0,15,30,45 */1 * * *", "Pacific/Chatham", utc(2026, 9, 26, 13), utc(2026, 9, 26, 15)
    )
    # after 01:45 (13:00 UTC): 02:00, 02:15, 02:30, then 03:45 at 14:00 UTC, 04:00 ...
    assert real == [utc(2026, 9, 26, 13, 15) + timedelta(minutes=15 * n) for n in range(8)]


def test_troll_two_hour_gap_and_repeat() -> None:
    zone = "Antarctica/Troll"
    # 29 March: 01:00 (+00) becomes 03:00 (+02); 01:30 and 02:30 are one firing at 01:00 UTC
    assert between("30 1,2 * * *", zone, utc(2026, 3, 28, 3), utc(2026, 3, 30, 3)) == [
        utc(2026, 3, 29, 1),
        utc(2026, 3, 29, 23, 30),
        utc(2026, 3, 30, 0, 30),
    ]
    # 25 October: 03:00 (+02) becomes 01:00 (+00): 01:00-02:59 happen twice
    fixed = between("30 1,2 * * *", zone, utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert fixed == [utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0, 30)]
    real = between("30 * * * *", zone, utc(2026, 10, 24, 22), utc(2026, 10, 25, 4))
    assert real == [utc(2026, 10, 24, 22, 30) + timedelta(hours=n) for n in range(6)]


def test_santiago_midnight_shifts() -> None:
    zone = "America/Santiago"
    # 6 September: 00:00 (-04) becomes 01:00 (-03): midnight fires at 01:00
    assert between("0 0 * * *", zone, utc(2026, 9, 5), utc(2026, 9, 7)) == [
        utc(2026, 9, 5, 4),
        utc(2026, 9, 6, 4),  # 01:00 -03, the gap's end
    ]
    # 5 April: 24:00 (-03) becomes 23:00 (-04) on the 4th, which is 25 hours long
    day = between("0 * 4 4 *", zone, utc(2026, 1, 1), utc(2027, 1, 1))
    assert day == [utc(2026, 4, 4, 3) + timedelta(hours=n) for n in range(25)]
    assert between("30 23 4 4 *", zone, utc(2026, 1, 1), utc(2027, 1, 1)) == [
        utc(2026, 4, 5, 2, 30)
    ]


def test_kolkata_has_no_dst() -> None:
    runs = between("30 2 * * *", "Asia/Kolkata", utc(2025, 12, 31, 20), utc(2026, 12, 31, 20))
    assert runs == [utc(2025, 12, 31, 21) + timedelta(days=n) for n in range(365)]


def test_next_occurrence_is_strictly_after() -> None:
    fields = fields_of("0 3 * * *")
    zone = ZoneInfo("Europe/Berlin")
    assert next_occurrence(fields, zone, utc(2026, 6, 1, 0, 59)) == utc(2026, 6, 1, 1)
    assert next_occurrence(fields, zone, utc(2026, 6, 1, 1)) == utc(2026, 6, 2, 1)
    berlin_time = datetime(2026, 6, 1, 3, tzinfo=zone)  # any aware time will do
    assert next_occurrence(fields, zone, berlin_time) == utc(2026, 6, 2, 1)


def test_a_rare_day_is_found_by_skipping_days_not_minutes() -> None:
    # 29 February on a Monday: the next is in 2044
    assert next_occurrence(
        fields_of("0 12 29 2 mon"), ZoneInfo("Europe/Berlin"), utc(2026, 1, 1)
    ) == utc(2044, 2, 29, 11)


def test_an_entry_whose_every_time_lies_in_a_gap_never_fires() -> None:
    # Troll springs from 01:00 to 03:00 on the last Sunday of March, and a 31 March that is
    # a Sunday is always that day: 01:xx of it never exists, and a wildcard minute follows
    # real time, so nothing fires. A bounded search ends empty; an open one answers None.
    fields = fields_of("* 1 31 3,4 sun")
    zone = ZoneInfo("Antarctica/Troll")
    assert list(occurrences(fields, zone, utc(2025, 12, 29), utc(2026, 12, 31))) == []
    assert next_occurrence(fields, zone, utc(2025, 12, 29)) is None
    # The same times as a fixed entry fire at the gap's end, 03:00 local.
    fixed = fields_of("0 1 31 3,4 sun")
    assert next_occurrence(fixed, zone, utc(2025, 12, 29)) == utc(2030, 3, 31, 1)


def test_fields_that_never_match_are_refused() -> None:
    every = frozenset(range(7))
    with pytest.raises(ValueError, match="never matches"):
        CronFields(
            frozenset({0}), frozenset({0}), frozenset({30, 31}), frozenset({2}), every, False
        )
    with pytest.raises(ValueError, match="days_of_week"):
        CronFields(
            frozenset({0}), frozenset({0}), frozenset({1}), frozenset({2}), frozenset(), False
        )
    with pytest.raises(ValueError, match="minutes"):
        CronFields(frozenset({60}), frozenset({0}), frozenset({1}), frozenset({2}), every, False)


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        next_occurrence(fields_of("0 3 * * *"), ZoneInfo("UTC"), datetime(2026, 1, 1))


@pytest.mark.parametrize(
    ("minute", "hour", "real_time"),
    [
        ("0", "*", True),  # hourly
        ("0", "*/2", True),
        ("0", "1-23/2", True),  # a stepped hour
        ("*", "3", True),  # every minute of 3 a.m.
        ("*/5", "3", True),
        ("30", "2", False),
        ("0-59/5", "3", False),  # a stepped minute at a fixed hour
        ("0", "0-23", False),  # every hour, written as a list: particular times (Vixie cron)
        (0, 3, False),  # numbers, as crontab(minute=0, hour=3) keeps them
    ],
)
def test_which_entries_follow_real_time(minute: object, hour: object, real_time: bool) -> None:
    assert follows_real_time(minute, hour) is real_time


def test_from_crontab_reads_celerys_fields() -> None:
    fields = CronFields.from_crontab(crontab(minute=0, hour=3, day_of_week="mon-fri"))
    assert fields == CronFields(
        minutes=frozenset({0}),
        hours=frozenset({3}),
        days_of_month=frozenset(range(1, 32)),
        months=frozenset(range(1, 13)),
        days_of_week=frozenset({1, 2, 3, 4, 5}),
        follows_real_time=False,
    )
    assert CronFields.from_crontab(crontab(minute=0)).follows_real_time
