"""When a periodic entry fires, for each of Celery's schedule types, as UTC instants that
every beat process computes alike.

Celery's own schedules answer "how long from the last run?" (``is_due(last_run_at)``),
and the last run is a beat's local memory: two beats with different memories disagree on
when the next run falls. Here an occurrence is a function of the entry alone (its
schedule, its time zone and, for an interval, its anchor: the instant it was first
created, which the store keeps), so any beat, at any time, names the same occurrences:

- an interval (``timedelta``, a number of seconds, ``celery.schedules.schedule``) fires
  at ``anchor + k * run_every`` for k = 1, 2, ...: first one interval after the entry was
  created, as Celery's beat first sends a new entry; with ``relative=True``, as in
  Celery, the times are rounded to the interval's resolution: the anchor is first
  rounded down, in the entry's zone, to the day, hour, minute or second
  (``celery.utils.time.delta_resolution``);
- a ``crontab`` fires by ``cron_times`` in the entry's zone, DST included;
- a ``solar`` event fires when ``ephem`` says it happens; where it does not happen every
  day (the polar night's sunrise), at its next occurrence, up to a year ahead;
- a ``clocked`` schedule fires once, at its instant; an ``rrule_schedule`` at its rule's
  wall-clock times in the entry's zone (schedules/rule_times.py).

An entry's ``start_time``, ``expires`` and ``one_off`` bound any of them
(schedules/window.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab, schedule, solar
from celery.utils.time import delta_resolution

from .cron_times import CronFields, as_utc, next_occurrence
from .schedules import rule_times
from .schedules.clocked import clocked
from .schedules.rrules import rrule_schedule
from .schedules.window import Window

__all__ = ["Occurrences"]

#: How far ahead a solar event is looked for: a polar night or day lasts under a year.
SOLAR_SEARCH_DAYS = 370


class Occurrences:
    """The occurrences of one entry's schedule (``crontab``, ``solar``, or an interval)."""

    def __init__(
        self, entry_schedule: Any, zone: ZoneInfo, anchor: datetime, window: Window | None = None
    ) -> None:
        self.zone = zone
        self._next = _next_function(entry_schedule, zone, as_utc(anchor, "anchor"))
        if window is not None:  # the entry's start_time, expires and one_off
            self._next = window.bound(self._next)
        #: The earliest moment after which none was found: "none" is for good (a schedule
        #: that never fires, or has ended), and finding it walks the calendar to the
        #: year 9998 (a fraction of a second), so it is found once.
        self._none_after: datetime | None = None

    def after(self, moment: datetime) -> datetime | None:
        """The first occurrence strictly after ``moment`` (aware), in UTC; None if there
        is none (a crontab whose every time lies in a DST gap of its zone)."""
        moment = as_utc(moment, "moment")
        if self._none_after is not None and moment >= self._none_after:
            return None
        found = self._next(moment)
        if found is None:
            self._none_after = moment
        return found

    def between(self, after: datetime, until: datetime) -> Iterator[datetime]:
        """Every occurrence in ``(after, until]``, in order."""
        until_utc = as_utc(until, "until")
        found = self.after(after)
        while found is not None and found <= until_utc:
            yield found
            found = self.after(found)


def _next_function(entry_schedule: Any, zone: ZoneInfo, anchor: datetime) -> Any:
    if isinstance(entry_schedule, clocked):
        return entry_schedule.next_after
    if isinstance(entry_schedule, rrule_schedule):
        return rule_times.next_function(entry_schedule, zone, anchor).after
    if isinstance(entry_schedule, crontab):
        fields = CronFields.from_crontab(entry_schedule)
        return lambda moment: next_occurrence(fields, zone, moment)
    if isinstance(entry_schedule, solar):
        return lambda moment: _next_solar(entry_schedule, moment)
    if isinstance(entry_schedule, schedule):
        return _interval(entry_schedule.run_every, entry_schedule.relative, zone, anchor)
    if isinstance(entry_schedule, (timedelta, int, float)):
        every = entry_schedule
        if not isinstance(every, timedelta):
            every = timedelta(seconds=every)
        return _interval(every, False, zone, anchor)
    raise TypeError(
        f"a periodic entry's schedule is a crontab, a solar, a schedule, a timedelta or a "
        f"number of seconds, not {type(entry_schedule).__name__}"
    )


def _interval(every: timedelta, relative: bool, zone: ZoneInfo, anchor: datetime) -> Any:
    if every <= timedelta(0):
        raise ValueError(f"an interval must be positive, not {every}")
    start = anchor
    if relative:  # Celery's rounding, in the entry's own zone
        start = delta_resolution(anchor.astimezone(zone), every).astimezone(timezone.utc)

    def next_after(moment: datetime) -> datetime | None:
        try:
            return start + max(1, (moment - start) // every + 1) * every
        except OverflowError:  # past the year 9999: there is no next one
            return None

    return next_after


def _next_solar(event: solar, moment: datetime) -> datetime | None:
    """The first time ``event`` happens strictly after ``moment``, searched as Celery's
    ``solar`` does (from each anti-transit when the sun stays up or down all day)."""
    ephem = event.ephem
    observer = ephem.Observer()
    observer.lat, observer.lon = str(event.lat), str(event.lon)
    observer.elev, observer.pressure = 0, 0
    observer.horizon = event._horizons[event.event]
    sun = ephem.Sun()
    find = getattr(observer, event._methods[event.event])
    options = {"use_center": True} if event._use_center_l[event.event] else {}
    start = ephem.Date(moment.replace(tzinfo=None))
    limit = ephem.Date(start + SOLAR_SEARCH_DAYS)
    while start < limit:
        try:
            found = find(sun, start=start, **options)
        except ephem.CircumpolarError:
            start = observer.next_antitransit(sun, start=start)
            continue
        instant = found.datetime().replace(tzinfo=timezone.utc)
        if instant > moment:
            return instant
        start = ephem.Date(found + ephem.second)  # ephem may return the moment itself
    return None
