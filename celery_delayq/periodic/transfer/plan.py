"""An import: each entry a source holds compared with the store's, then added, changed
(the fields that differ named) or left as it is, through ``periodic.upsert``; a dry run
says the same and writes nothing.

Two entries are the same when every field is, and, where the source says where an
interval counts from, their next occurrences fall within ``TOLERANCE`` of each other:
another scheduler's last run is when it sent it, a little after it was due.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from celery import Celery

from .. import manage
from ..cron_times import follows_real_time
from ..entry import PeriodicEntry, schedule_from_json
from .model import Found, Incoming, Skipped

#: How far apart two entries' next occurrences may be and still count as the same.
TOLERANCE = timedelta(seconds=1)
#: What became of an entry: the words a dry run and an import use.
ADDED, CHANGED, SAME, SKIPPED = "added", "changed", "same", "skipped"


@dataclass(frozen=True)
class Step:
    """What became (or, in a dry run, would become) of one entry of the source."""

    name: str
    outcome: str  # ADDED, CHANGED, SAME or SKIPPED
    fields: tuple[str, ...] = ()  # CHANGED: the fields that differ
    reason: str = ""  # SKIPPED: why
    notes: tuple[str, ...] = ()  # what of it is not kept here


def transfer(app: Celery, found: Iterable[Found], now: datetime, dry_run: bool) -> list[Step]:
    """Bring the store's entries to those ``found`` (others are left alone): each one
    added, changed or left as it is; nothing written if ``dry_run``."""
    listed = manage.listing(app, now=now)
    stored = {info.entry.name: info.entry for info in listed.entries}
    unreadable = {each.name for each in listed.unreadable}
    steps: list[Step] = []
    seen: set[str] = set()
    for each in found:
        step = _decide(each, stored, unreadable, seen, now)
        if isinstance(each, Incoming) and step.outcome in (ADDED, CHANGED) and not dry_run:
            step = _write(app, each, step, now)
        steps.append(step)
    return steps


def _decide(
    each: Found,
    stored: dict[str, PeriodicEntry],
    unreadable: set[str],
    seen: set[str],
    now: datetime,
) -> Step:
    """What to do with one entry of the source (``seen``: the names before it)."""
    if isinstance(each, Skipped):
        return Step(each.name, SKIPPED, reason=each.reason)
    name = each.entry.name
    if name in seen:
        return Step(name, SKIPPED, reason="named twice in the source: the first one is taken")
    seen.add(name)
    return _compare(stored.get(name), each, now, name in unreadable)


def _compare(old: PeriodicEntry | None, new: Incoming, now: datetime, unreadable: bool) -> Step:
    """The step ``new`` is against the stored ``old`` (None: there is none readable)."""
    name = new.entry.name
    if old is None and unreadable:
        return Step(name, CHANGED, ("a record that cannot be read",), notes=new.notes)
    if old is None:
        return Step(name, ADDED, notes=new.notes)
    differ = differences(old, new, now)
    return Step(name, CHANGED if differ else SAME, differ, notes=new.notes)


def differences(old: PeriodicEntry, new: Incoming, now: datetime) -> tuple[str, ...]:
    """The fields of the stored ``old`` that ``new`` changes (``anchor``: the times of
    an interval the source counts from elsewhere)."""
    before, after = json.loads(old.to_json()), json.loads(new.entry.to_json())
    keys = sorted((before.keys() | after.keys()) - {"anchor_ms", "schedule"})
    differ = [key for key in keys if before.get(key) != after.get(key)]
    if not same_schedule(before["schedule"], after["schedule"]):
        differ.insert(0, "schedule")
    if new.anchored and not differ and not same_times(old, new.entry, now):
        differ.append("anchor")
    return tuple(differ)


def same_schedule(one: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether two schedules (``schedule_json``'s) are the same: a crontab's fields as
    numbers or as text (django-celery-beat keeps text) are, if Celery reads the same
    times from them and cron's DST rule is the same."""
    if one == other or not ("crontab" in one and "crontab" in other):
        return one == other
    rules = [follows_real_time(s["crontab"]["minute"], s["crontab"]["hour"]) for s in (one, other)]
    return bool(schedule_from_json(one) == schedule_from_json(other)) and rules[0] == rules[1]


def same_times(old: PeriodicEntry, new: PeriodicEntry, now: datetime) -> bool:
    """Whether the next occurrences of ``old`` and ``new`` after ``now`` fall together."""
    first = old.occurrences().after(now)
    if first is None:
        return new.occurrences().after(now) is None
    near = new.occurrences().after(first - TOLERANCE)
    return near is not None and abs(near - first) <= TOLERANCE


def _write(app: Celery, new: Incoming, step: Step, now: datetime) -> Step:
    """Upsert ``new`` (its anchor kept if the source gave it); a refusal skips it."""
    entry = new.entry
    given = {each.name: getattr(entry, each.name) for each in fields(entry)}
    anchor = given.pop("anchor") if new.anchored else None
    given.pop("anchor", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", manage.UnknownTaskWarning)
        try:
            manage.upsert(app, **given, now=now, anchor=anchor)
        except ValueError as exc:  # its message cannot be built here: one stops no other
            return Step(step.name, SKIPPED, reason=str(exc), notes=step.notes)
    unknown = [str(each.message) for each in caught if each.category is manage.UnknownTaskWarning]
    return Step(step.name, step.outcome, step.fields, notes=step.notes + tuple(unknown))
