"""RFC 5545 rules as periodic schedules (periodic/schedules/rrules.py, rule_times.py): kept
as their text and start in the entry's zone, and firing where dateutil's own rrule says,
DST included, whatever time they are asked from, however long ago they started."""

from __future__ import annotations

import time
import tracemalloc
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import DAILY, FR, MO, MONTHLY, SU, WEEKLY, rrule, rrulestr
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from celery_delayq.periodic.cron_times import fixed_instant
from celery_delayq.periodic.occurrences import Occurrences
from celery_delayq.periodic.schedules.rrules import (
    RuleFields,
    RuleParts,
    as_rrule_schedule,
    rrule_schedule,
    rule_fields,
    rule_parts,
)
from celery_delayq.periodic.schedules.rule_times import RuleTimes, rule_times

pytestmark = pytest.mark.unit

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "UTC"]
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


def occurrences(text: str, zone: ZoneInfo = BERLIN, dtstart: datetime | None = None) -> Occurrences:
    return Occurrences(rrule_schedule(text, dtstart), zone, ANCHOR)


def between(text: str, after: datetime, until: datetime, **options) -> list[datetime]:
    return list(occurrences(text, **options).between(after, until))


# --- what dateutil says, the property ---------------------------------------------------------

#: How long a window each frequency is asked over (a few thousand times at most).
FREQS = {
    "YEARLY": timedelta(days=2 * 366),
    "MONTHLY": timedelta(days=366),
    "WEEKLY": timedelta(days=90),
    "DAILY": timedelta(days=60),
    "HOURLY": timedelta(days=6),
    "MINUTELY": timedelta(hours=8),
    "SECONDLY": timedelta(minutes=20),
}
#: How far from its start a rule is asked from, at most: the oracle walks the rule from its
#: start (some 50,000 times at most), where Occurrences restarts it near the time asked.
REACH = {
    "YEARLY": timedelta(days=11 * 365),
    "MONTHLY": timedelta(days=11 * 365),
    "WEEKLY": timedelta(days=11 * 365),
    "DAILY": timedelta(days=11 * 365),
    "HOURLY": timedelta(days=3 * 365),
    "MINUTELY": timedelta(days=20),
    "SECONDLY": timedelta(hours=8),
}
DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]


def listed(values: set[int]) -> str:
    return ",".join(map(str, sorted(values)))


def sets(low: int, high: int, most: int) -> st.SearchStrategy[set[int]]:
    return st.sets(
        st.integers(low, high).filter(bool if low < 0 else lambda _: True),
        min_size=1,
        max_size=most,
    )


@st.composite
def day_parts(draw: st.DrawFn, freq: str) -> list[str]:
    """At most one way to pick days (BYDAY, BYMONTHDAY, BYWEEKNO or BYYEARDAY): a rule
    that never fires would be searched to the year 9999."""
    kinds = ["none", "BYDAY"]
    kinds += ["BYMONTHDAY"] if freq in ("YEARLY", "MONTHLY") else []
    kinds += ["BYWEEKNO", "BYYEARDAY"] if freq == "YEARLY" else []
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return []
    if kind == "BYDAY":
        days = ",".join(sorted(draw(st.sets(st.sampled_from(DAYS), min_size=1))))
        setpos = freq == "MONTHLY" and draw(st.booleans())  # 4 or 5 of each weekday
        return [
            f"BYDAY={days}",
            *([f"BYSETPOS={draw(st.sampled_from([1, 2, -1]))}"] if setpos else []),
        ]
    values = {
        "BYMONTHDAY": sets(-3, 28, 3),
        "BYWEEKNO": sets(-2, 53, 2),
        "BYYEARDAY": sets(-3, 365, 3),
    }
    return [f"{kind}={listed(draw(values[kind]))}"]


@st.composite
def time_parts(draw: st.DrawFn, freq: str) -> list[str]:
    parts = []
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY") and draw(st.booleans()):
        parts.append(f"BYHOUR={listed(draw(sets(0, 23, 2)))}")
    if freq != "SECONDLY" and draw(st.booleans()):
        parts.append(f"BYMINUTE={listed(draw(sets(0, 59, 2)))}")
    if draw(st.booleans()):
        parts.append(f"BYSECOND={listed(draw(sets(0, 59, 2)))}")
    return parts


@st.composite
def rules(draw: st.DrawFn) -> tuple[str, datetime]:
    """A rule's text (FREQ, INTERVAL, WKST, COUNT or UNTIL, a few BY parts) and its start."""
    freq = draw(st.sampled_from(sorted(FREQS)))
    parts = [f"FREQ={freq}", f"INTERVAL={draw(st.integers(1, 5))}"]
    parts += draw(day_parts(freq)) + draw(time_parts(freq))
    if freq == "WEEKLY" and draw(st.booleans()):
        parts.append(f"WKST={draw(st.sampled_from(DAYS))}")
    start = draw(st.datetimes(datetime(2016, 1, 1), datetime(2026, 1, 1))).replace(microsecond=0)
    ending = draw(st.sampled_from(["none", "count", "until"]))
    if ending == "count":
        parts.append(f"COUNT={draw(st.integers(1, 40))}")
    elif ending == "until":
        until = start + draw(st.timedeltas(timedelta(days=1), timedelta(days=4000)))
        parts.append(until.strftime("UNTIL=%Y%m%dT%H%M%S"))
    return ";".join(parts), start


def dateutils_own(text: str, start: datetime, zone: ZoneInfo, after: datetime, until: datetime):
    """The oracle: dateutil's rrule from its start, ``between`` the wall times around
    (after, until], each wall time read by cron's rule for a fixed time, once."""
    rule = rrulestr(f"RRULE:{text}", dtstart=start)
    margin = timedelta(days=2)
    walls = rule.between(
        after.astimezone(zone).replace(tzinfo=None) - margin,
        until.astimezone(zone).replace(tzinfo=None) + margin,
        inc=True,
    )
    return sorted({t for t in (fixed_instant(w, zone) for w in walls) if after < t <= until})


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rule=rules(), zone=st.sampled_from(ZONES), where=st.floats(0, 1), again=st.floats(0, 1))
def test_a_rules_occurrences_are_dateutils_own(rule, zone: str, where: float, again: float) -> None:
    """Asked from anywhere, far from the rule's start or not, twice on one rule (the
    second time from earlier or later: the walk kept is reused or started again)."""
    text, start = rule
    try:  # an INTERVAL that never meets a BYSECOND, say: dateutil refuses it
        rrulestr(f"RRULE:{text}", dtstart=start)
    except ValueError:
        assume(False)
    tz = ZoneInfo(zone)
    freq = text.split(";")[0][5:]
    times = Occurrences(rrule_schedule(text, start), tz, ANCHOR)
    for fraction in (where, again):
        after = start.replace(tzinfo=UTC) + REACH[freq] * fraction
        until = after + FREQS[freq]
        assert list(times.between(after, until)) == dateutils_own(text, start, tz, after, until)


# --- DST -----------------------------------------------------------------------------------------


def test_a_wall_time_in_the_gap_fires_at_the_gaps_end_and_a_repeated_one_at_the_first() -> None:
    """Berlin: on 29 March 2026 02:00-02:59 does not exist (01:00 UTC the clocks jump to
    03:00); on 25 October 02:00-02:59 happens twice (CEST, then CET)."""
    daily = "FREQ=DAILY;BYHOUR=2;BYMINUTE=30"
    spring = between(daily, utc(2026, 3, 27), utc(2026, 3, 31))
    assert spring == [
        utc(2026, 3, 27, 1, 30),
        utc(2026, 3, 28, 1, 30),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 30, 0, 30),
    ]
    fall = between(daily, utc(2026, 10, 24), utc(2026, 10, 27))
    assert fall == [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


def test_several_wall_times_in_one_gap_are_one_firing() -> None:
    """Every quarter hour: 02:00, 02:15, 02:30 and 02:45 do not exist, and 03:00 is the
    gap's end: one firing at 01:00 UTC, then every quarter hour again."""
    quarter = between("FREQ=MINUTELY;INTERVAL=15", utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30))
    assert quarter == [
        utc(2026, 3, 29, 0, 45),
        utc(2026, 3, 29, 1),
        utc(2026, 3, 29, 1, 15),
        utc(2026, 3, 29, 1, 30),
    ]


def test_an_hourly_rule_fires_once_per_wall_hour_across_fall_back() -> None:
    """A rule's times are wall-clock times: 02:00 on 25 October is one time (the first)."""
    hourly = between("FREQ=HOURLY;BYMINUTE=0", utc(2026, 10, 24, 22, 30), utc(2026, 10, 25, 3, 30))
    assert hourly == [
        utc(2026, 10, 24, 23),
        utc(2026, 10, 25, 0),
        utc(2026, 10, 25, 2),
        utc(2026, 10, 25, 3),
    ]


# --- rules that fire rarely, or never ---------------------------------------------------------

#: Rules that never fire: no 30 February, no second time in a day of one, no 31 April.
NEVER = [
    "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",
    "FREQ=DAILY;BYHOUR=9;BYSETPOS=2",
    "FREQ=MINUTELY;BYMONTH=4;BYMONTHDAY=31;UNTIL=20300101T000000",
]


@pytest.mark.parametrize("rule", NEVER)
@pytest.mark.promise("periodic-rrule-bounded")
def test_a_rule_that_never_fires_has_no_next_time(rule) -> None:
    never = occurrences(rule, zone=ZoneInfo("UTC"), dtstart=datetime(2026, 3, 1, 9))
    assert never.after(utc(2026, 3, 1)) is None


@pytest.mark.slow
@pytest.mark.promise("periodic-rrule-bounded")
def test_a_rule_that_never_fires_is_found_to_in_a_fraction_of_dateutils_walk() -> None:
    """dateutil walks the calendar day by day to the year 9999 for a rule that never fires
    (seconds of CPU, on every call: a preview or a beat's pass held that long); here the
    walk ends within 500 years of the time asked, and a later call does not walk again."""
    rule, start = NEVER[0], datetime(2026, 3, 2, 9)
    spent = time.process_time()
    assert rrulestr(f"RRULE:{rule}", dtstart=start).after(start) is None
    dateutils = time.process_time() - spent
    spent = time.process_time()
    assert occurrences(rule, zone=ZoneInfo("UTC"), dtstart=start).after(utc(2026, 3, 2)) is None
    assert occurrences(rule, zone=ZoneInfo("UTC"), dtstart=start).after(utc(2026, 3, 3)) is None
    assert time.process_time() - spent < dateutils / 4


@pytest.mark.promise("periodic-rrule-bounded")
def test_a_time_within_a_century_is_found_and_one_further_counts_as_none() -> None:
    zone = ZoneInfo("UTC")
    leap_monday = occurrences(
        "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29;BYDAY=MO", zone=zone, dtstart=datetime(2026, 1, 1)
    )
    assert leap_monday.after(utc(2026, 1, 1)) == utc(2044, 2, 29)
    assert leap_monday.after(utc(2044, 2, 29)) == utc(2072, 2, 29)
    far = "FREQ=YEARLY;COUNT=3"
    assert occurrences(far, zone=zone, dtstart=datetime(2140, 1, 1)).after(utc(2026, 1, 1)) is None
    found = occurrences(far, zone=zone, dtstart=datetime(2140, 1, 1)).after(utc(2045, 1, 1))
    assert found == utc(2140, 1, 1)
    unbounded = occurrences("FREQ=YEARLY", zone=zone, dtstart=datetime(2140, 1, 1))
    assert unbounded.after(utc(2026, 1, 1)) is None
    later = occurrences("FREQ=YEARLY", zone=zone, dtstart=datetime(2140, 1, 1))
    assert later.after(utc(2045, 1, 1)) == utc(2140, 1, 1)


def test_a_rule_found_ended_in_a_repeated_hours_second_pass_is_found_from_its_first() -> None:
    """New York, 1 November 2026: 01:00-01:59 happens twice (EDT, then EST). A rule ending
    at 01:45 (firing at the first 01:45) has no time left after 01:30 EST, but has one
    after 01:30 EDT, the same wall time an hour earlier: what one call found (none) is
    not taken for the other."""
    times = rule_times(
        "FREQ=MINUTELY;INTERVAL=15;UNTIL=20261101T014500",
        datetime(2026, 11, 1),
        ZoneInfo("America/New_York"),
    )
    assert times.after(utc(2026, 11, 1, 6, 30)) is None  # 01:30 EST
    assert times.after(utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 1, 5, 45)  # 01:30 EDT


# --- count, until, start --------------------------------------------------------------------------


def test_count_and_until_end_the_rule() -> None:
    counted = occurrences("FREQ=DAILY;COUNT=3", dtstart=datetime(2026, 6, 1, 9))
    assert list(counted.between(utc(2026, 1, 1), utc(2027, 1, 1))) == [
        utc(2026, 6, d, 7) for d in (1, 2, 3)
    ]
    assert counted.after(utc(2026, 6, 3, 7)) is None
    until = occurrences("FREQ=DAILY;UNTIL=20260603T090000", dtstart=datetime(2026, 6, 1, 9))
    assert list(until.between(utc(2026, 1, 1), utc(2027, 1, 1))) == [
        utc(2026, 6, d, 7) for d in (1, 2, 3)
    ]


@pytest.mark.timeout(20)
def test_a_rule_started_long_ago_is_asked_from_now_without_walking_its_past() -> None:
    """Every 3 seconds since 2000: 300 million times lie before 2029, which dateutil
    alone walks on each call; this is restarted near the time asked."""
    secondly = occurrences(
        "FREQ=SECONDLY;INTERVAL=3", zone=ZoneInfo("UTC"), dtstart=datetime(2000, 1, 1)
    )
    assert secondly.after(utc(2029, 5, 1, 0, 0, 1)) == utc(2029, 5, 1, 0, 0, 3)
    weekly = occurrences("FREQ=WEEKLY;INTERVAL=2;BYDAY=MO", dtstart=datetime(2000, 1, 3, 9))
    assert weekly.after(utc(2026, 6, 1)) == utc(2026, 6, 1, 7)  # 2000-01-03 + 1378 weeks
    assert weekly.after(utc(2026, 6, 1, 7)) == utc(2026, 6, 15, 7)


def test_with_no_start_the_rule_starts_at_the_anchor() -> None:
    """dateutil takes a weekly rule's day, hour, minute and second from its start."""
    weekly = Occurrences(rrule_schedule("FREQ=WEEKLY"), BERLIN, utc(2026, 6, 3, 7, 15, 30))
    assert weekly.after(utc(2026, 6, 3, 8)) == utc(2026, 6, 10, 7, 15, 30)


# --- what is kept ---------------------------------------------------------------------------------

FALLBACK = datetime(2026, 1, 1, 10, 23, 17)


@pytest.mark.parametrize(
    "given, kept",
    [
        ("FREQ=WEEKLY;BYDAY=MO", rrule_schedule("FREQ=WEEKLY;BYDAY=MO")),
        ("rrule:freq=weekly;byday=mo;interval=1", rrule_schedule("FREQ=WEEKLY;BYDAY=MO")),
        (
            "DTSTART;TZID=America/New_York:20260105T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=3",
            rrule_schedule("FREQ=WEEKLY;COUNT=3;BYDAY=MO", datetime(2026, 1, 5, 15)),
        ),
        (  # UNTIL in UTC: a wall time of Berlin (01:00 in winter)
            "FREQ=DAILY;BYHOUR=9;UNTIL=20261231T000000Z",
            rrule_schedule("FREQ=DAILY;UNTIL=20261231T010000;BYHOUR=9"),
        ),
        (
            rrule(WEEKLY, byweekday=MO, dtstart=datetime(2026, 1, 5, 9, tzinfo=UTC)),
            rrule_schedule("FREQ=WEEKLY;BYDAY=MO", datetime(2026, 1, 5, 10)),
        ),
        (
            rrule(DAILY, count=2, dtstart=datetime(2026, 3, 29, 2, 30)),  # a wall time, kept
            rrule_schedule("FREQ=DAILY;COUNT=2", datetime(2026, 3, 29, 2, 30)),
        ),
        (
            rrule_schedule("FREQ=DAILY", datetime(2026, 1, 5, 9, tzinfo=UTC)),
            rrule_schedule("FREQ=DAILY", datetime(2026, 1, 5, 10)),
        ),
    ],
)
def test_a_rule_is_kept_as_its_text_and_its_start_in_the_entrys_zone(given, kept) -> None:
    assert as_rrule_schedule(given, BERLIN, FALLBACK) == kept
    assert as_rrule_schedule(kept, BERLIN, FALLBACK) == kept  # read back: the same


@pytest.mark.parametrize(
    "given, says",
    [
        ("FREQ=YEARLY;BYEASTER=0", "BYEASTER"),
        ("RRULE:FREQ=DAILY\nEXDATE:20260101T000000", "one RRULE"),
        ("RRULE:FREQ=DAILY\nRRULE:FREQ=WEEKLY", "one RRULE"),
        ("FREQ=FORTNIGHTLY", "not an RFC 5545 rule"),
        ("every monday", "not an RFC 5545 rule"),
        ("DTSTART;TZID=Mars/Olympus:20260101T000000\nRRULE:FREQ=DAILY", "not an RFC 5545 rule"),
        ("FREQ=DAILY;COUNT=1000000", "COUNT is at most"),
        (rrule_schedule("DTSTART:20260101T000000\nRRULE:FREQ=DAILY"), "dtstart"),
        (rrule_schedule("FREQ=DAILY", "2026-01-01"), "dtstart"),
        (42, "dateutil rrule or RFC 5545 text"),
    ],
)
def test_what_is_no_single_rfc_5545_rule_is_refused(given, says) -> None:
    with pytest.raises(ValueError, match=says):
        as_rrule_schedule(given, BERLIN, FALLBACK)


@pytest.mark.parametrize(
    ("rule", "fields"),
    [
        (
            rrulestr("DTSTART:20260301T090000\nRRULE:FREQ=DAILY;COUNT=3"),
            RuleFields(datetime(2026, 3, 1, 9), 3, None, False),
        ),
        (
            rrulestr("RRULE:FREQ=WEEKLY;UNTIL=20260401T000000Z", dtstart=utc(2026, 3, 2, 8)),
            RuleFields(utc(2026, 3, 2, 8), None, utc(2026, 4, 1), False),
        ),
        (
            rrulestr(
                "DTSTART;TZID=Europe/Berlin:20260301T090000\nRRULE:FREQ=DAILY;UNTIL=20260310T080000Z",
                tzids=ZoneInfo,
            ),
            RuleFields(
                datetime(2026, 3, 1, 9, tzinfo=BERLIN),
                None,
                datetime(2026, 3, 10, 9, tzinfo=BERLIN),
                False,
            ),
        ),
        (
            rrule(DAILY, dtstart=datetime(2026, 1, 1), byeaster=0, count=2),
            RuleFields(datetime(2026, 1, 1), 2, None, True),
        ),
    ],
)
def test_the_fields_read_from_dateutils_rrule_are_those_it_was_made_with(rule, fields) -> None:
    """dateutil has no public accessor for these (rrules.rule_fields reads its attributes):
    pinned here, run on the oldest dateutil allowed and the newest."""
    found = rule_fields(rule)
    assert found == fields  # aware times: the same instants
    assert [m is None or m.tzinfo is None for m in (found.dtstart, found.until)] == [
        m is None or m.tzinfo is None for m in (fields.dtstart, fields.until)
    ]


def test_the_parts_read_from_dateutils_rrule_are_those_it_was_made_with() -> None:
    """The rest of what redbeat's rrule is made from (redbeat_rules.their_rule), pinned as
    the fields are: the BY parts given, none taken from the start."""
    rule = rrulestr("DTSTART:20260301T090000\nRRULE:FREQ=MONTHLY;INTERVAL=2;WKST=SU;BYDAY=MO,-1FR")
    parts = rule_parts(rule)
    assert parts == RuleParts(MONTHLY, 2, SU.weekday, {"byweekday": (MO, FR(-1))})


def test_a_counted_rule_keeps_its_times_packed() -> None:
    """A counted rule's times are kept for the process (each entry's ``rule_times`` is
    cached): 100,000 of them hold under 1.5 MB, not a datetime object each (4.8 MB)."""
    tracemalloc.start()
    try:
        times = RuleTimes("FREQ=SECONDLY;COUNT=100000", datetime(2030, 1, 1), ZoneInfo("UTC"))
        noon = datetime(2030, 1, 1, 12, tzinfo=timezone.utc)
        assert times.after(noon) == noon + timedelta(seconds=1)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 1_500_000
