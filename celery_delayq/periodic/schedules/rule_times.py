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
- one ``RuleTimes`` per rule, zone and start is kept for the process (``rule_times``);
- a time more than ``SEARCH_YEARS`` after the time asked counts as none (the rule has
  ended), and is looked for in bounded time: between two times dateutil walks the
  calendar day by day, to the year 9999 for a rule that never fires (30 February, or a
  ``BYSETPOS`` past its day's times), seconds of CPU. The calendar repeats every 400
  years (the same weekdays, the same leap years), so the walk is moved ahead by whole
  400-year cycles, to end within ``SEARCH_YEARS`` + 400 years of the time asked, and the
  times it finds moved back.

A wall time becomes an instant by cron's rule for a fixed time (``cron_times.
fixed_instant``): one in a DST gap fires at the first instant after the gap (RFC 5545
would read it with the offset before the gap, an hour later on the wall; cron's rule keeps
the times in order, each after the one before), one that occurs twice fires at the first.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

from ..cron_times import fixed_instant
from .rrules import rrule_schedule, wall_of

__all__ = ["RuleTimes", "next_function", "rule_times"]

#: How far after the time asked a rule's next time is looked for (one further counts as
#: none: the rule has ended).
SEARCH_YEARS = 100
#: 400 Gregorian years, after which the calendar repeats (146,097 days: whole weeks).
CYCLE = timedelta(days=146_097)
#: The last year dateutil walks to.
LAST_YEAR = 9999
_MICROSECOND = timedelta(microseconds=1)
#: A rule's ``UNTIL`` as dateutil writes it (a wall time).
UNTIL_FORMAT = "%Y%m%dT%H%M%S"
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
    covered: datetime  # the walk ends here (dateutil's last year, moved back)
    found_ahead: deque[datetime] = field(default_factory=deque)


class RuleTimes:
    """The times of one rule, from one start, in one zone."""

    def __init__(self, text: str, start: datetime, zone: ZoneInfo) -> None:
        self.zone = zone
        self.start = start
        self.parts = dict(part.split("=", 1) for part in text.split(";"))
        self.freq = self.parts["FREQ"]
        self.interval = int(self.parts.get("INTERVAL", "1"))
        #: A counted rule's times, all of them (walked on first use).
        self._all: array[int] | None = None  # a counted rule's times, packed (_packed)
        self._all_covered = datetime.min  # how far ``_all`` was walked
        self._walk: _Walk | None = None
        #: No time after this instant (aware) fires up to the wall time ``_none_through``
        #: (a walk found none): an instant, as the same wall time is two instants where
        #: the clocks go back, and the later one may find none where the earlier finds one.
        self._none_after: datetime | None = None
        self._none_through = datetime.min
        self._lock = threading.Lock()  # one per rule, shared by a process's threads

    def after(self, moment: datetime) -> datetime | None:
        """The first instant strictly after ``moment`` (aware, UTC) at which it fires."""
        wall = moment.astimezone(self.zone).replace(tzinfo=None)
        horizon = _years_after(wall, SEARCH_YEARS)
        with self._lock:
            none_after = self._none_after
            if none_after is not None and none_after <= moment and horizon <= self._none_through:
                return None
            # a wall time at or before ``wall`` fires at or before ``moment`` (cron's
            # rule keeps them in order); in a repeated hour, some after it do too
            beyond = None
            for each in self._walls_after(wall):
                if each > horizon:
                    beyond = each
                    break
                try:
                    instant = fixed_instant(each, self.zone)
                except OverflowError:  # past the year 9999: there is no next one
                    break
                if instant > moment:
                    return instant
            through = self._covered() if beyond is None else beyond - timedelta(microseconds=1)
            self._none_after, self._none_through = moment, through
        return None

    def _covered(self) -> datetime:
        """How far the times walked last reach (none after ``_none_after`` up to it)."""
        if "COUNT" in self.parts:
            return self._all_covered
        return datetime.min if self._walk is None else self._walk.covered

    def _walls_after(self, wall: datetime) -> Iterator[datetime]:
        """The rule's wall times strictly after ``wall``, in order."""
        if "COUNT" in self.parts:
            if self._all is None or self._all_covered < _years_after(wall, SEARCH_YEARS):
                # counted from its start: walked from there, as far as asked
                times, self._all_covered = _moved(self.parts, self.start, wall)
                self._all = array("q", map(_packed, times))
            return map(_unpacked, self._all[bisect_right(self._all, _packed(wall)) :])
        restart = self._restart_point(wall)
        walk = self._walk
        stale = walk is None or wall < walk.asked or walk.covered < _years_after(wall, SEARCH_YEARS)
        if stale or (restart is not None and walk is not None and walk.asked < restart):
            parts = self.parts if restart is None else self._restart_parts()
            times, covered = _moved(parts, restart or self.start, wall)
            walk = self._walk = _Walk(restart, times, wall, covered)
        assert walk is not None
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

    def _restart_parts(self) -> dict[str, str]:
        """The rule's parts with dtstart's defaults written in, to restart it elsewhere."""
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
        return parts


def _moved(
    parts: dict[str, str], start: datetime, wall: datetime
) -> tuple[Iterator[datetime], datetime]:
    """The times of the rule of ``parts`` from ``start``, walked whole 400-year cycles
    later (its ``UNTIL`` too) so that dateutil's walk ends within ``SEARCH_YEARS`` + 400
    years of ``wall``, each moved back; and where the walk ends, moved back."""
    cycles = max(0, min(LAST_YEAR - SEARCH_YEARS - wall.year, LAST_YEAR - start.year) // 400)
    parts = dict(parts)
    if cycles and "UNTIL" in parts:
        try:
            until = datetime.strptime(parts["UNTIL"], UNTIL_FORMAT) + cycles * CYCLE
        except ValueError:  # not dateutil's spelling (it wrote the rule): walked unmoved
            cycles = 0
        except OverflowError:  # after the walk's end: it bounds nothing walked
            del parts["UNTIL"]
        else:
            parts["UNTIL"] = f"{until:{UNTIL_FORMAT}}"
    shift = cycles * CYCLE
    text = ";".join(f"{key}={value}" for key, value in parts.items())
    rule = rrulestr(f"RRULE:{text}", dtstart=start + shift)
    return (each - shift for each in rule), datetime(LAST_YEAR, 12, 31, 23, 59, 59) - shift


def _packed(wall: datetime) -> int:
    """A wall time as microseconds since ``datetime.min``: a counted rule's 100,000 times
    keep 8 bytes each in an array, not a datetime object each (about 7 times less)."""
    return (wall - datetime.min) // _MICROSECOND


def _unpacked(packed: int) -> datetime:
    return datetime.min + timedelta(microseconds=packed)


def _years_after(wall: datetime, years: int) -> datetime:
    """``years`` after ``wall`` (a day earlier from a 29 February; the calendar's end)."""
    try:
        return wall.replace(year=wall.year + years)
    except ValueError:
        try:
            return wall + timedelta(days=365 * years)
        except OverflowError:
            return datetime.max


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
