"""When a periodic entry fires, for each of Celery's schedule types, as UTC instants that
every beat process computes alike.

Celery's own schedules answer "how long from the last run?" (``is_due(last_run_at)``),
and the last run is a beat's local memory: two beats with different memories disagree on
when the next run falls. Here an occurrence is a function of the entry alone (its
schedule, its time zone and, for an interval, its anchor: the instant it was first
created, which the store keeps), so any beat, at any time, names the same occurrences:

- an interval (``timedelta``, a number of seconds, ``celery.schedules.schedule``) fires
  at ``anchor + k * run_every`` for k = 1, 2, ...: first one interval after the entry was
  created, as Celery's beat first sends a new entry;
- a ``schedule(run_every, relative=True)`` fires when Celery's beat would: each run is the
  one before (the anchor for the first) plus the interval, rounded down in the entry's
  zone (:class:`_RelativeChain`);
- a ``crontab`` fires by ``cron_times`` in the entry's zone, DST included;
- a ``solar`` event fires when ``ephem`` says it happens; where it does not happen every
  day (the polar night's sunrise), at its next occurrence, up to a year ahead;
- a ``clocked`` schedule fires once, at its instant; an ``rrule_schedule`` at its rule's
  wall-clock times in the entry's zone (schedules/rule_times.py).

An entry's ``start_time``, ``expires`` and ``one_off`` bound any of them
(schedules/window.py).
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from threading import Lock
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import crontab, schedule, solar
from dateutil.tz import datetime_exists, resolve_imaginary

from .cron_times import LAST_YEAR, CronFields, as_utc, next_occurrence, offset_change
from .schedules import rule_times
from .schedules.clocked import clocked
from .schedules.rrules import rrule_schedule
from .schedules.window import Window

__all__ = ["Occurrences"]

#: How far ahead a solar event is looked for: a polar night or day lasts under a year.
SOLAR_SEARCH_DAYS = 370
#: The most missed occurrences walked one by one; past that the walk jumps towards now.
MOST_WALKED = 10_000

SECOND, MINUTE, HOUR, DAY, YEAR = (timedelta(seconds=s) for s in (1, 60, 3600, 86400, 366 * 86400))
#: Celery's resolutions (``delta_resolution``): an interval of at least a day, an hour, a
#: minute or a second is rounded down to that unit, by keeping this many of the time's
#: hour, minute and second (the rest are zeroed, and the microsecond always).
UNITS = {DAY: 0, HOUR: 1, MINUTE: 2, SECOND: 3}
#: How often a zone's UTC offset is probed for changes: no zone in tzdata changes its
#: offset twice within it (checked by the tests), so each change shows between two probes.
PROBE_SECONDS = 6 * 3600


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

    def upcoming(self, start: datetime, end: datetime, most: int) -> list[datetime]:
        """The occurrences in ``(start, end]``, at least the next one, at most ``most``."""
        found = self.after(start)
        times: list[datetime] = []
        while found is not None and len(times) < most and (found <= end or not times):
            times.append(found)
            found = self.after(found)
        return times

    def missed(self, start: datetime, now: datetime, bound: int) -> tuple[list[datetime], int]:
        """The last ``bound`` (at least one) occurrences in ``(start, now]``, and how many
        there are; a long stretch (a fast entry after a long outage) is walked in bounded
        time, jumping to the last ``bound``'s worth before now."""
        kept: deque[datetime] = deque(maxlen=max(bound, 1))
        count, walked, previous = 0, 0, start
        found = self.after(start)
        while found is not None and found <= now:
            count += 1
            kept.append(found)
            walked += 1
            if walked == MOST_WALKED:
                gap = found - previous
                jump = now - gap * (bound + 1)
                if jump > found:
                    walked, found = 0, self.after(jump)
                    count += max(0, int((jump - kept[-1]) / gap)) if gap else 0
                    continue
            previous, found = found, self.after(found)
        return list(kept), count


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
    if relative:
        return _relative_chain(every, zone, anchor).after

    def next_after(moment: datetime) -> datetime | None:
        try:
            return anchor + max(1, (moment - anchor) // every + 1) * every
        except OverflowError:  # past the year 9999: there is no next one
            return None

    return next_after


@lru_cache(maxsize=4096)
def _relative_chain(every: timedelta, zone: ZoneInfo, anchor: datetime) -> _RelativeChain:
    """One chain per entry for the process: the writer asks a fresh ``Occurrences`` on each
    pass, and the chain keeps the points it stepped to."""
    return _RelativeChain(every, zone, anchor)


class _RelativeChain:
    """Celery's ``schedule(every, relative=True)``: each run is the run before (the anchor
    for the first) plus ``every``, rounded down in the zone: to the second under a minute,
    else to the minute, the hour or, from a day on, the local midnight.

    As ``celery.utils.time.remaining`` (Celery 5.7) computes it when beat's last run is the
    run before: :meth:`_step`. Where the zone's offset holds still, the runs are ``stride``
    apart (``every`` rounded down to its unit), so the chain jumps there and steps one run
    at a time only across a change of offset; the points it stepped to are kept.
    """

    def __init__(self, every: timedelta, zone: ZoneInfo, anchor: datetime) -> None:
        if every < SECOND:
            raise ValueError(
                f"a relative interval must be at least 1 second, not "
                f"{every.total_seconds():g} s: Celery rounds each relative run down to the "
                "second, so its runs would never move past the first"
            )
        self.every, self.zone = every, zone
        self.unit = next(unit for unit in UNITS if every >= unit)
        self.stride = every // self.unit * self.unit
        self._lock = Lock()
        self._known = [self._step(anchor)]
        #: The last stretch found where the zone's offset holds still: a run, from which
        #: the runs are ``stride`` apart as long as each one's interval ends before the
        #: instant beside it. Most asks land in it and are answered without the zone.
        self._steady = (self._known[0], self._known[0])

    def after(self, moment: datetime) -> datetime | None:
        """The first run strictly after ``moment`` (UTC)."""
        with self._lock:
            try:
                return self._after(moment)
            except OverflowError:  # past the year 9999: there is no next one
                return None

    def _after(self, moment: datetime) -> datetime | None:
        found = self._on_grid(moment, *self._steady)
        if found is not None:
            return found
        point = self._known[max(bisect_right(self._known, moment) - 1, 0)]
        while point <= moment:
            if point.year > LAST_YEAR:
                return None
            if self._on_unit(point):  # jump while the offset holds still
                horizon = moment + self.every + YEAR
                self._steady = (point, _offset_change_after(self.zone, point, horizon) or horizon)
                found = self._on_grid(moment, *self._steady)
                if found is not None:
                    return found
                # to the last run from which a whole interval ends before the change
                steady = -((point + self.every - self._steady[1]) // self.stride)
                point += max(0, steady) * self.stride
            point = self._step(point)
            if point not in self._known:
                insort(self._known, point)
        return point

    def _on_grid(self, moment: datetime, start: datetime, end: datetime) -> datetime | None:
        """The first run after ``moment`` if it lies on the grid from the run ``start``,
        ``stride`` apart, whose intervals all end before ``end``."""
        if moment < start:
            return None
        steps = (moment - start) // self.stride + 1
        if start + (steps - 1) * self.stride + self.every >= end:
            return None
        return start + steps * self.stride

    def _on_unit(self, moment: datetime) -> bool:
        local = moment.astimezone(self.zone)
        return self._round_down(local) == local

    def _round_down(self, local: datetime) -> datetime:
        """``delta_resolution(local, every).replace(microsecond=0)``, the fold kept."""
        kept = (local.hour, local.minute, local.second)[: UNITS[self.unit]]
        hour, minute, second = (*kept, 0, 0, 0)[:3]
        return local.replace(hour=hour, minute=minute, second=second, microsecond=0)

    def _step(self, last: datetime) -> datetime:
        """The run after the one at ``last`` (UTC), as Celery's ``remaining`` finds it."""
        start = last.astimezone(self.zone)
        if self.every < DAY:
            return self._step_elapsed(last, start)
        end = start + self.every  # calendar days: the wall clock's sum, then its midnight
        later = [each for each in self._rounded(end) if each > last]
        return min(later, default=end.astimezone(timezone.utc))

    def _step_elapsed(self, last: datetime, start: datetime) -> datetime:
        """Under a day: the elapsed time added, rounded down, kept after ``last``."""
        end_utc = last + self.every
        end = end_utc.astimezone(self.zone)
        found = self._rounded(end)
        rounded = max((each for each in found if each <= end_utc), default=min(found))
        if rounded > last or self.every < MINUTE:
            return rounded
        # A partial-hour fall back rounded it to the run itself or before: Celery also
        # tries the next unit's boundary and the wall clock's sum, both folds of each.
        unit = HOUR if self.every >= HOUR else MINUTE
        found += self._rounded(end + unit) + self._rounded(start + self.every)
        later = [each for each in found if each > last]
        return max((each for each in later if each <= end_utc), default=min(later, default=end_utc))

    def _rounded(self, local: datetime) -> list[datetime]:
        """The instants (UTC) the wall time ``local`` rounded down stands for, fold 0 and
        fold 1: two in a repeated hour; a time in a DST gap moved past the gap."""
        wall = self._round_down(local)
        found = []
        for fold in (0, 1):
            candidate = wall.replace(fold=fold)
            if not datetime_exists(candidate):
                resolved = resolve_imaginary(candidate)
                if resolved > candidate:  # the wall times, compared in one zone
                    candidate = resolved
            found.append(candidate.astimezone(timezone.utc))
        return found


def _offset_change_after(zone: ZoneInfo, after: datetime, until: datetime) -> datetime | None:
    """The first change of ``zone``'s UTC offset in ``(after, until]``; None if none."""
    for year in range(after.year, min(until.year, LAST_YEAR) + 1):
        for change in _offset_changes(zone, year):
            if change > after:
                return change if change <= until else None
    return None


@lru_cache(maxsize=4096)
def _offset_changes(zone: ZoneInfo, year: int) -> tuple[datetime, ...]:
    """The instants of UTC year ``year`` at which ``zone``'s UTC offset changes (each the
    first of its new offset), found by probing every :data:`PROBE_SECONDS`."""
    first, last = (
        int(datetime(y, 1, 1, tzinfo=timezone.utc).timestamp()) - 1 for y in (year, year + 1)
    )
    probes = [
        datetime.fromtimestamp(t, timezone.utc) for t in (*range(first, last, PROBE_SECONDS), last)
    ]
    offsets = [probe.astimezone(zone).utcoffset() for probe in probes]
    return tuple(
        offset_change(zone, probes[n], probes[n + 1])
        for n in range(len(probes) - 1)
        if offsets[n] != offsets[n + 1]
    )


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
