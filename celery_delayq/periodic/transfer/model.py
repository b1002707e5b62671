"""What a transfer carries: an entry read from a source (with whether its anchor is the
source's), an entry skipped and why, and what an export wrote; and what every form
shares (a row read on its own, an interval's last run, the entries Celery adds)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Union

from celery import Celery

from ..describe import BACKEND_CLEANUP
from ..entry import PeriodicEntry, error_text, schedule_from_json, schedule_json, zone_of
from ..manage import EntryInfo
from ..schedules.rrules import rrule_schedule, wall_of


@dataclass(frozen=True)
class Incoming:
    """An entry a source holds, as it would be stored here. ``anchored``: its anchor is
    where the source counts the interval from (its last run), to be kept; otherwise it
    is where the store counts from (the entry's own, or now). ``notes``: what of it is
    not kept here, said aloud."""

    entry: PeriodicEntry
    anchored: bool = False
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Skipped:
    """An entry a source holds (or the store holds, on export) that the other side
    cannot keep, and why."""

    name: str
    reason: str


#: One entry of a source, read.
Found = Union[Incoming, Skipped]


@dataclass(frozen=True)
class Export:
    """An export: its text, the entries it leaves out (with why), and what of the
    others it does not keep (one line each)."""

    text: str
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def read_each(name: str, build: Callable[[], Found]) -> Found:
    """``build()``, or why it failed: a source's rows are anyone's, and one bad row
    stops no other, whatever it raises."""
    try:
        return build()
    except Exception as exc:
        return Skipped(name, error_text(exc).removeprefix("ValueError: "))


def celery_schedule(entry: PeriodicEntry) -> Any:
    """The entry's schedule as Celery's own object (a number of seconds or a
    ``timedelta`` as ``celery.schedules.schedule``), as other schedulers store it."""
    return schedule_from_json(schedule_json(entry.schedule))


def every_of(entry: PeriodicEntry) -> timedelta | None:
    """The entry's interval, or None for a crontab or a solar."""
    every = schedule_json(entry.schedule).get("every")
    return None if every is None else timedelta(seconds=every)


def zoned(entry: PeriodicEntry) -> bool:
    """Whether the entry's times depend on its time zone (a crontab, a relative
    interval), which Celery's beat and redbeat read in the app's zone."""
    data = schedule_json(entry.schedule)
    return "crontab" in data or bool(data.get("relative"))


def app_zone(app: Celery) -> str:
    """The app's time zone as Celery's beat reads its schedules in (``app.timezone``)."""
    return str(app.timezone)


def last_run(entry: PeriodicEntry, now: datetime) -> datetime:
    """When another scheduler should take the entry's last run to be, so that it names
    the same next occurrence: an interval's last occurrence at or before ``now`` (its
    anchor if none), else ``now``."""
    every = every_of(entry)
    if every is None:
        return now
    occurrences = entry.occurrences()
    found, last = occurrences.after(now - 2 * every), entry.anchor
    while found is not None and found <= now:
        last, found = found, occurrences.after(found)
    return last


def unfit_elsewhere(app: Celery, info: EntryInfo, what: str, own_zones: bool = False) -> str | None:
    """Why another scheduler (``what``) cannot take the entry of ``info``, for what every
    other form shares; None if it can: Celery's own entry is left to the other beat,
    which adds its own; and unless it keeps each entry's zone (``own_zones``), a beat
    reads a crontab or a relative interval in the app's zone. (A clocked or rrule
    schedule, ``one_off``, ``start_time`` and ``expires`` are each form's to judge.)"""
    if info.added_by:
        return "added by Celery: the other beat adds its own where the app needs it"
    entry = info.entry
    if not own_zones and zoned(entry) and entry.timezone != app_zone(app):
        return (
            f"its time zone {entry.timezone} is not the app's ({app_zone(app)}): {what} "
            "reads it in the app's zone"
        )
    return None


def rule_of(entry: PeriodicEntry) -> tuple[str, datetime]:
    """An rrule entry's RRULE text and the wall time it starts at: its own ``dtstart``,
    else its ``start_time``, else its creation (its anchor), as its times are found
    (rule_times.next_function): another form needs the start said, not implied."""
    rule: rrule_schedule = entry.schedule
    moment = entry.start_time or entry.anchor
    start = rule.dtstart or wall_of(moment, zone_of(entry.timezone))
    return rule.rule, start.replace(microsecond=0)


def policy_notes(entry: PeriodicEntry, what: str) -> list[str]:
    """The notes for a ``catch_up`` or an ``overlap`` another scheduler does not keep."""
    notes = []
    if entry.catch_up != "latest":
        notes.append(
            f"{entry.name}: catch_up {entry.catch_up!r} is not kept: {what} runs the latest once"
        )
    if entry.overlap != "allow":
        notes.append(
            f"{entry.name}: overlap {entry.overlap!r} is not kept: {what} starts every "
            "occurrence, the previous run going or not"
        )
    return notes


def celerys_own(name: str, task: str) -> Skipped | None:
    """Celery's own entry as another scheduler stored it: skipped, as delayq's beat adds
    its own where the app needs it (beat.py)."""
    if name == BACKEND_CLEANUP and task == BACKEND_CLEANUP:
        return Skipped(name, "added by Celery's beat: delayq's beat adds its own where needed")
    return None
