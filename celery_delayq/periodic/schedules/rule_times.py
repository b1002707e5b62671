"""When an ``rrule_schedule`` fires, as UTC instants: dateutil's ``rrule.after`` on the
rule's wall-clock times in the entry's zone, kept fast for a rule that started long ago.

dateutil walks a rule from its ``dtstart`` on every ``after`` call (its own cache keeps
every time walked, and is scanned from the start too): a minutely rule started a year ago
would walk half a million times per call. Here:

- a rule with no ``COUNT`` is restarted near the time asked, at the start of the period of
  its own grid (its year, month, week, day... counted in ``INTERVAL`` steps from the
  rule's start) that holds that time, with the defaults dateutil takes from ``dtstart``
  (the ``BYHOUR`` of a daily rule, the ``BYDAY`` of a weekly one...) written into the
  rule: from there it names the same times as from its start (``UNTIL`` included);
- a rule with a ``COUNT`` (at most ``MOST_COUNT`` times) is walked once, and its times
  are kept;
- the walk last used is kept, so the writer's run of ``after`` calls, each from the time
  found before, continues it instead of starting over;
- one ``RuleTimes`` per rule, zone and start is kept for the process (``rule_times``).

A wall time becomes an instant by cron's rule for a fixed time (``cron_times.
fixed_instant``): one in a DST gap fires at the first instant after the gap (RFC 5545
would read it with the offset before the gap, an hour later on the wall; cron's rule keeps
the times in order, each after the one before), one that occurs twice fires at the first.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

from ..cron_times import fixed_instant
from .rrules import rrule_schedule, wall_of

__all__ = ["RuleTimes", "next_function", "rule_times"]

#: RFC 5545 weekday codes, Monday first (``date.weekday()``).
WEEKDAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
#: How long one period of each frequency is, for those of a fixed length.
FIXED_PERIODS = {
    "DAILY": timedelta(days=1),
    "HOURLY": timedelta(hours=1),
    "MINUTELY": timedelta(minutes=1),
    "SECONDLY": timedelta(seconds=1),
}
#: The frequencies finer than each time field, whose value dateutil takes from dtstart.
_TIME_DEFAULTS = {
    "BYHOUR": ("YEARLY", "MONTHLY", "WEEKLY", "DAILY"),
    "BYMINUTE": ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY"),
    "BYSECOND": ("YEARLY", "MONTHLY", "WEEKLY", "DAILY", "HOURLY", "MINUTELY"),
}
#: The fields whose presence stops dateutil from taking a day from dtstart.
_DAY_FIELDS = ("BYWEEKNO", "BYYEARDAY", "BYMONTHDAY", "BYDAY")


@dataclass
class _Walk:
    """A walk along a rule: where it started, and the times it pulled and holds still
    (every time up to ``asked``, the last wall time asked after, is dropped)."""

    restart: datetime | None
    times: Iterator[datetime]
    asked: datetime
    found_ahead: deque[datetime] = field(default_factory=deque)


class RuleTimes:
    """The times of one rule, from one start, in one zone."""

    def __init__(self, text: str, start: datetime, zone: ZoneInfo) -> None:
        self.zone = zone
        self.start = start
        self.rule: rrule = rrulestr(f"RRULE:{text}", dtstart=start)
        self.parts = dict(part.split("=", 1) for part in text.split(";"))
        self.freq = self.parts["FREQ"]
        self.interval = int(self.parts.get("INTERVAL", "1"))
        #: A counted rule's times, all of them (walked on first use).
        self._all: list[datetime] | None = None
        self._walk: _Walk | None = None
        self._lock = threading.Lock()  # one per rule, shared by a process's threads

    def after(self, moment: datetime) -> datetime | None:
        """The first instant strictly after ``moment`` (aware, UTC) at which it fires."""
        wall = moment.astimezone(self.zone).replace(tzinfo=None)
        with self._lock:
            # a wall time at or before ``wall`` fires at or before ``moment`` (cron's
            # rule keeps them in order); in a repeated hour, some after it do too
            for each in self._walls_after(wall):
                try:
                    instant = fixed_instant(each, self.zone)
                except OverflowError:  # past the year 9999: there is no next one
                    return None
                if instant > moment:
                    return instant
        return None

    def _walls_after(self, wall: datetime) -> Iterator[datetime]:
        """The rule's wall times strictly after ``wall``, in order."""
        if "COUNT" in self.parts:
            if self._all is None:
                self._all = list(self.rule)
            return iter(self._all[bisect_right(self._all, wall) :])
        restart = self._restart_point(wall)
        walk = self._walk
        if walk is None or wall < walk.asked or (restart is not None and walk.asked < restart):
            walk = self._walk = _Walk(restart, iter(self._rule_from(restart)), wall)
        walk.asked = wall
        while walk.found_ahead and walk.found_ahead[0] <= wall:
            walk.found_ahead.popleft()
        return _continued(walk, wall)

    def _restart_point(self, wall: datetime) -> datetime | None:
        """The start of the period of the rule's grid that holds ``wall``; None while
        that is the rule's first period (the rule is walked from its start)."""
        start, step = self.start, self.interval
        try:
            point = self._period_of(wall, start, step)
        except (ValueError, OverflowError):  # near the year 9999: walked from the start
            return None
        return point if point > start else None

    def _period_of(self, wall: datetime, start: datetime, step: int) -> datetime:
        if self.freq == "YEARLY":
            point = datetime(start.year + (wall.year - start.year) // step * step, 1, 1)
        elif self.freq == "MONTHLY":
            months = (wall.year - start.year) * 12 + wall.month - start.month
            index = start.year * 12 + start.month - 1 + months // step * step
            point = datetime(index // 12, index % 12 + 1, 1)
        elif self.freq == "WEEKLY":
            first = _week_start(start.date(), self.parts.get("WKST", "MO"))
            weeks = (wall.date() - first).days // 7
            point = datetime.combine(first + timedelta(weeks=weeks // step * step), time())
        else:
            length = FIXED_PERIODS[self.freq] * step
            first = _period_start(start, self.freq)
            point = first + (wall - first) // length * length
        return point

    def _rule_from(self, point: datetime | None) -> rrule:
        """The rule restarted at ``point`` (None: the rule itself), dtstart's defaults
        written in."""
        if point is None:
            return self.rule
        parts = dict(self.parts)
        if not any(name in parts for name in _DAY_FIELDS):
            if self.freq == "YEARLY":
                parts.setdefault("BYMONTH", str(self.start.month))
            if self.freq in ("YEARLY", "MONTHLY"):
                parts["BYMONTHDAY"] = str(self.start.day)
            if self.freq == "WEEKLY":
                parts["BYDAY"] = WEEKDAYS[self.start.weekday()]
        for name, finer in _TIME_DEFAULTS.items():
            if self.freq in finer:
                parts.setdefault(name, str(getattr(self.start, name[2:].lower())))
        text = ";".join(f"{key}={value}" for key, value in parts.items())
        return rrulestr(f"RRULE:{text}", dtstart=point)


def _continued(walk: _Walk, wall: datetime) -> Iterator[datetime]:
    """The times ``walk`` holds, then those it walks on to, each after ``wall`` (each
    one pulled is kept, for the next call to start from)."""
    yield from list(walk.found_ahead)
    for found in walk.times:
        if found > wall:
            walk.found_ahead.append(found)
            yield found


def _week_start(day: date, wkst: str) -> date:
    """The first day of ``day``'s week, weeks starting on ``wkst``."""
    return day - timedelta(days=(day.weekday() - WEEKDAYS.index(wkst)) % 7)


def _period_start(moment: datetime, freq: str) -> datetime:
    """The start of ``moment``'s day, hour, minute or second."""
    if freq == "DAILY":
        return moment.replace(hour=0, minute=0, second=0)
    if freq == "HOURLY":
        return moment.replace(minute=0, second=0)
    if freq == "MINUTELY":
        return moment.replace(second=0)
    return moment


@lru_cache(maxsize=1024)
def rule_times(rule: str, start: datetime, zone: ZoneInfo) -> RuleTimes:
    """The ``RuleTimes`` of ``rule`` from ``start`` (a wall time) in ``zone``, one per
    process: every entry's ``occurrences()`` (each beat pass, each listing) reuses it."""
    return RuleTimes(rule, start, zone)


def next_function(schedule: rrule_schedule, zone: ZoneInfo, anchor: datetime) -> RuleTimes:
    """The times of ``schedule`` in ``zone``; with no ``dtstart``, from ``anchor`` (aware:
    the entry's start time, else its creation)."""
    start = schedule.dtstart if schedule.dtstart is not None else wall_of(anchor, zone)
    return rule_times(schedule.rule, start.replace(microsecond=0), zone)
