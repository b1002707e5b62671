"""Another scheduler's own times for an entry: Celery's ``remaining_estimate`` stepped
from each run to the next, as its beat (and redbeat's, and django-celery-beat's) does,
with ``now`` the run; and the check that ours fall at the same times."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery.schedules import solar

from celery_delayq.periodic.entry import PeriodicEntry

UTC = timezone.utc
YEAR = timedelta(days=365)
#: Our anchors are kept to the millisecond; a source's last run has microseconds.
TO_THE_MS = timedelta(milliseconds=1)


def celery_runs(
    source: Any, last_run_at: datetime, zone: ZoneInfo, after: datetime, until: datetime
) -> list[datetime]:
    """The runs of the source's schedule in ``(after, until]`` (UTC), from its last run:
    each next one is ``remaining_estimate`` from the one before, asked at that run, in
    the zone its beat reads it in. A solar event's run is taken a second after it is
    due, as a beat sends it a moment late (asked at the event, ephem names it again)."""
    current = last_run_at.astimezone(zone)
    source.nowfun = lambda: current
    runs: list[datetime] = []
    while True:
        delta = source.remaining_estimate(current)
        if delta is None:
            return runs
        due = current.astimezone(UTC) + delta
        if due > until:
            return runs
        if due > after:
            runs.append(due)
        late = timedelta(seconds=1) if isinstance(source, solar) else timedelta(0)
        current = (due + late).astimezone(zone)


def year_of(
    entry: PeriodicEntry, after: datetime, most: int = 500
) -> tuple[list[datetime], datetime]:
    """The entry's occurrences in the year after ``after``, the first ``most`` of them
    (an entry every few seconds has millions), and the end of the span they cover."""
    found, until = entry.occurrences().after(after), after + YEAR
    times: list[datetime] = []
    while found is not None and found <= until and len(times) < most:
        times.append(found)
        found = entry.occurrences().after(found)
    return times, (times[-1] if len(times) == most else until)


def assert_same_times(
    entry: PeriodicEntry,
    theirs: list[datetime],
    after: datetime,
    until: datetime,
    fewest: int = 11,
) -> None:
    """Our occurrences of ``entry`` in ``(after, until]`` are ``theirs``, one for one
    (within a millisecond; a second for a solar event: ephem's search from another
    start), and there are at least ``fewest`` of them (a one-off has one)."""
    ours = list(entry.occurrences().between(after, until))
    close = timedelta(seconds=1) if isinstance(entry.schedule, solar) else TO_THE_MS
    assert len(ours) == len(theirs), (entry.name, len(ours), len(theirs))
    apart = [(a, b) for a, b in zip(ours, theirs) if abs(a - b) > close]
    assert apart == [], (entry.name, apart[:3])
    assert len(ours) >= fewest, entry.name  # a year of it was compared
