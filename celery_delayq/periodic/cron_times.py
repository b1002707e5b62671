"""When a crontab fires, as real (UTC) instants, in the entry's IANA time zone, DST included.

The fields are Celery's crontab fields, ANDed as ``celery.schedules.crontab`` does (a day
must match the month, the day of the month *and* the day of the week; day of week 0 is
Sunday). They are matched against the local wall time in the entry's zone, and the
transitions follow Vixie cron's rules:

- A *fixed* entry (a particular time of day) whose local time does not exist (spring
  forward) fires once, at the first instant after the gap; several of its times inside one
  gap, and one right at the gap's end, are that one firing.
- A fixed entry whose local time occurs twice (fall back) fires once, at the first.
- An entry that *follows real time* (a wildcard or stepped hour, or a wildcard minute) fires
  at every real instant whose local wall time matches: an hourly entry fires every real hour,
  the repeated hour included; local times inside a gap do not exist and are skipped.

Vixie cron: "Only jobs that run at a particular time (not specified as @hourly, nor with '*'
in the hour or minute specifier) are affected" (cron(8)); it marks a job as a wildcard one
when its minute or hour field starts with ``*``. A stepped hour (``1-23/2``) is a rhythm,
not a time of day, so it follows real time too.

Standard library only: this module sits below every adapter and takes plain values.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, date, datetime, time, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

__all__ = [
    "LAST_YEAR",
    "CronFields",
    "as_utc",
    "fixed_instant",
    "follows_real_time",
    "next_occurrence",
    "occurrences",
    "offset_change",
]

#: More than any UTC offset (14 hours at most): no firing of a local day comes earlier than
#: that day's wall-clock midnight read as UTC, minus this.
_SPREAD = timedelta(days=1)

#: The last year searched: the one before ``datetime.MAXYEAR``, so that a day's horizon and
#: a zone's offset can still be added to its instants.
LAST_YEAR = MAXYEAR - 1

_RANGES = {
    "minutes": (0, 59),
    "hours": (0, 23),
    "days_of_month": (1, 31),
    "months": (1, 12),
    "days_of_week": (0, 6),
}


@dataclass(frozen=True)
class CronFields:
    """A crontab's fields as plain sets, Celery's numbering (``days_of_week`` 0 = Sunday).

    ``follows_real_time`` picks the DST rule (see the module's docstring). Fields that can
    never match a day (February 30, an empty set) are refused here with a ``ValueError``:
    any day that exists falls on each weekday within the calendar's 400-year cycle. An
    entry can still never *fire* in a given zone, when it follows real time and every wall
    time it matches lies in a DST gap (``* 1 31 3 sun`` in Antarctica/Troll):
    :func:`next_occurrence` answers None for it.
    """

    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    follows_real_time: bool

    def __post_init__(self) -> None:
        for name, (low, high) in _RANGES.items():
            values: frozenset[int] = getattr(self, name)
            if not values or min(values) < low or max(values) > high:
                raise ValueError(f"{name} must be a non-empty set within {low}-{high}")
        if not any(
            day <= calendar.monthrange(2000, month)[1]  # 2000: a leap year, February has 29
            for month in self.months
            for day in self.days_of_month
        ):
            raise ValueError("this crontab never matches: no chosen month has the chosen days")

    @classmethod
    def from_crontab(cls, crontab: Any) -> CronFields:
        """Read a ``celery.schedules.crontab`` (duck typed: its expanded sets and its text)."""
        return cls(
            minutes=frozenset(crontab.minute),
            hours=frozenset(crontab.hour),
            days_of_month=frozenset(crontab.day_of_month),
            months=frozenset(crontab.month_of_year),
            days_of_week=frozenset(crontab.day_of_week),
            follows_real_time=follows_real_time(crontab._orig_minute, crontab._orig_hour),
        )


def follows_real_time(minute_text: object, hour_text: object) -> bool:
    """Whether an entry follows real time across DST, from its minute and hour as written.

    True when the hour has a ``*`` or a step (``/``), or the minute starts with ``*``.
    Values given as numbers or sets are particular times.
    """
    minute = minute_text.strip() if isinstance(minute_text, str) else ""
    hour = hour_text if isinstance(hour_text, str) else ""
    return minute.startswith("*") or "*" in hour or "/" in hour


def next_occurrence(fields: CronFields, zone: ZoneInfo, after: datetime) -> datetime | None:
    """The first firing strictly after ``after`` (aware), as an aware UTC datetime.

    None when the entry never fires in this zone before the year :data:`LAST_YEAR` ends
    (every wall time it matches lies in a DST gap); the search then walks its matching
    days to that year, which takes up to a second or two for such an entry.
    """
    return next(occurrences(fields, zone, after), None)


def occurrences(
    fields: CronFields, zone: ZoneInfo, after: datetime, until: datetime | None = None
) -> Iterator[datetime]:
    """Every firing in ``(after, until]`` in order, in UTC; with no ``until``, up to the
    end of :data:`LAST_YEAR`.

    Walks the matching local days only; a day's firings are held back until no later day
    can fire before them (a fall-back across midnight interleaves two days).
    """
    after_utc = as_utc(after, "after")
    until_utc = None if until is None else as_utc(until, "until")
    # Days before after's local date: their gap firings may land after it.
    start = after_utc.astimezone(zone).date() - timedelta(days=2)
    hours = sorted(fields.hours)
    steps = [timedelta(minutes=minute) for minute in sorted(fields.minutes)]
    held: list[datetime] = []
    last = after_utc
    for day in _matching_days(fields, start):
        held.extend(_day_firings(hours, steps, zone, day, fields.follows_real_time))
        held.sort()
        horizon = datetime.combine(day + timedelta(days=1), time(), timezone.utc) - _SPREAD
        ready = bisect_left(held, horizon)
        for instant in held[:ready]:
            if until_utc is not None and instant > until_utc:
                return
            if instant > last:  # also drops a gap's firing that two wall times share
                last = instant
                yield instant
        del held[:ready]
        if until_utc is not None and horizon > until_utc:
            return  # every firing still to come lands at or after the horizon


def as_utc(moment: datetime, name: str) -> datetime:
    """``moment`` in UTC; a naive one is refused (it names no instant)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime")
    return moment.astimezone(timezone.utc)


def _matching_days(fields: CronFields, start: date) -> Iterator[date]:
    """The local dates from ``start`` on whose month, day and weekday all match."""
    months = sorted(fields.months)
    days = sorted(fields.days_of_month)
    year = start.year
    while year <= LAST_YEAR:
        for month in months:
            if (year, month) < (start.year, start.month):
                continue
            last_day = calendar.monthrange(year, month)[1]
            for number in days:
                if number > last_day:
                    break
                day = date(year, month, number)
                if day >= start and day.isoweekday() % 7 in fields.days_of_week:
                    yield day
        year += 1


def _day_firings(
    hours: list[int], steps: list[timedelta], zone: ZoneInfo, day: date, follows_real_time: bool
) -> list[datetime]:
    """The instants at which this local day's matching wall times fire (unsorted)."""
    firings: list[datetime] = []
    for hour in hours:
        start = datetime.combine(day, time(hour))
        offset = _steady_offset(start, zone)
        if offset is not None:  # the usual hour: plain arithmetic
            base = start.replace(tzinfo=timezone.utc) - offset
            firings.extend(base + step for step in steps)
            continue
        for step in steps:
            firings.extend(_instants(start + step, zone, follows_real_time))
    return firings


def fixed_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The instant (UTC) at which a fixed local wall time (naive) fires in ``zone``, by
    cron's rules: a time in a DST gap at the first instant after the gap, a time that
    occurs twice at the first. Never earlier than a wall time before it (in order)."""
    return _instants(wall, zone, False)[0]


def _steady_offset(start: datetime, zone: ZoneInfo) -> timedelta | None:
    """The one UTC offset of every wall minute of this local hour, or None if a transition
    touches it. Reading both ends both ways suffices: no zone changes twice within an hour.
    """
    end = start + timedelta(minutes=59)
    offsets = {
        moment.replace(tzinfo=zone, fold=fold).utcoffset()
        for moment in (start, end)
        for fold in (0, 1)
    }
    offset = offsets.pop()
    return offset if not offsets else None


def _instants(wall: datetime, zone: ZoneInfo, follows_real_time: bool) -> list[datetime]:
    """The instants at which one local wall time fires, by the DST rules."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(timezone.utc)
    if first == second:  # it exists once
        return [first]
    if first < second:  # it occurs twice (fall back): fold 0 is the earlier
        return [first, second] if follows_real_time else [first]
    # It does not exist (spring forward): fold 0 reads it with the offset before the gap,
    # which lands after the transition; fold 1 with the one after, which lands before.
    return [] if follows_real_time else [offset_change(zone, second, first)]


def offset_change(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant of the new offset, between two UTC instants that straddle it
    (``zone``'s offset changes once between them)."""
    old = before.astimezone(zone).utcoffset()
    low, high = int(before.timestamp()), int(after.timestamp())  # offset(low) is old
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == old:
            low = middle
        else:
            high = middle
    return datetime.fromtimestamp(high, timezone.utc)
