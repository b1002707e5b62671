"""Managing periodic entries at run time, without restarting anything.

``upsert`` adds or replaces an entry; ``remove``, ``pause`` and ``resume`` change it;
``run_now`` sends one extra occurrence at once; ``get``, ``entries`` and ``listing`` read
them with their next occurrences (``listing`` also names the stored records that cannot
be read). Each change takes the entry's next version (registry.py) and rewrites its
occurrences written ahead at once (writer.py), so it takes effect from the next
occurrence even while no beat runs, and is recorded in its change log (audit/) as made by
``changed_by`` (default: the OS user) through the interface acting (default: the API).
Bad input, and an entry whose message cannot be built
(``OccurrenceWriter.check``), raise a ``ValueError`` before anything is written; a task
name this app does not know is written, with a warning (the workers may know it).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from celery import Celery

from ..brokers.connect import open_store
from .audit import ChangeLog, acting
from .describe import added_by_celery
from .entry import PeriodicEntry, entry_from_settings, error_text
from .history import EntryHistory, History
from .registry import EntryRegistry, Unreadable, Versioned
from .sending import send_occurrence, task_known
from .writer import OccurrenceWriter

__all__ = [
    "EntryInfo",
    "Listing",
    "Synced",
    "UnknownTaskWarning",
    "Upserted",
    "entries",
    "get",
    "listing",
    "pause",
    "remove",
    "resume",
    "run_now",
    "sync_settings",
    "upsert",
]

logger = logging.getLogger(__name__)

#: How many next occurrences ``get`` and ``entries`` list.
NEXT_LISTED = 3


class UnknownTaskWarning(UserWarning):
    """The entry's task is not registered in the app that wrote it."""


@dataclass(frozen=True)
class Upserted:
    """What ``upsert`` did."""

    version: int
    replaced: bool  # an entry of that name was there, and is replaced


@dataclass(frozen=True)
class EntryInfo:
    """An entry, its version, its next occurrences (UTC) and what became of the past ones
    (its last run a worker started; occurrences missed while every beat was down)."""

    entry: PeriodicEntry
    version: int
    next_runs: list[datetime]
    history: History = History()
    added_by: str | None = None  # why it is there though no one wrote it (Celery's own)


def upsert(
    app: Celery,
    name: str,
    task: str,
    schedule: Any,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    timezone: str | None = None,
    catch_up: str = "latest",
    enabled: bool = True,
    *,
    one_off: bool = False,
    start_time: datetime | None = None,
    expires: datetime | None = None,
    description: str = "",
    note: str = "",
    overlap: str = "allow",
    origin: str = "api",
    now: datetime | None = None,
    anchor: datetime | None = None,
    changed_by: str | None = None,
) -> Upserted:
    """Add the entry ``name``, or replace the one of that name, from its next occurrence.

    ``schedule``: a ``crontab``, a ``solar``, a ``celery.schedules.schedule``, a
    ``timedelta``, a number of seconds, a ``clocked(datetime)``, or an RFC 5545 rule (a
    ``dateutil`` rrule or its text). ``timezone``: an IANA name (default: the app's
    ``timezone``, else UTC). ``catch_up``: ``latest``, ``all`` or ``none``. As in
    django-celery-beat: ``one_off`` (only the first occurrence runs), ``start_time`` and
    ``expires`` (aware datetimes: none before, none after) and a ``description``;
    ``note``: why it is paused (as ``pause`` keeps it). ``overlap``: ``allow``, or
    ``skip``: a run that would start while the entry's previous run is still going is
    skipped, and counted. ``anchor``: where an interval
    counts from (default: the replaced entry's if its rhythm is the same, else now), such as
    another scheduler's last run of it. ``changed_by``: who the change log names.
    """
    moment = _now(now)
    with open_store(app) as store, acting(changed_by):
        registry = EntryRegistry(store.client, store.keys)
        old = registry.get(name)
        entry = PeriodicEntry(
            name=name,
            task=task,
            schedule=schedule,
            anchor=anchor or moment,
            timezone=timezone or app_zone(app),
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            options=dict(options or {}),
            catch_up=catch_up,
            enabled=enabled,
            origin=origin,
            one_off=one_off,
            start_time=start_time,
            expires=expires,
            description=description,
            note=note,
            overlap=overlap,
        )
        if anchor is None and old is not None and old.entry.rhythm() == entry.rhythm():
            entry = replace(entry, anchor=old.entry.anchor)  # the same occurrences go on
        writer = OccurrenceWriter(app)
        writer.check(entry, moment)
        if not task_known(app, task):
            warnings.warn(
                f"periodic entry {name!r}: no task {task!r} is registered in this app "
                f"(written anyway: the workers may know it)",
                UnknownTaskWarning,
                stacklevel=2,
            )
        version, replaced = registry.put(entry)
    writer.advance(entry, version, moment)
    return Upserted(version, replaced)


def remove(
    app: Celery, name: str, *, now: datetime | None = None, changed_by: str | None = None
) -> bool:
    """Remove the entry ``name`` and its occurrences still to come; whether it was there."""
    with open_store(app) as store, acting(changed_by):
        version, removed = EntryRegistry(store.client, store.keys).remove(name)
        EntryHistory(store.client, store.keys).forget(name)
    if isinstance(removed, Versioned):
        OccurrenceWriter(app).forget(removed.entry, version, _now(now))
    return removed is not None


def pause(
    app: Celery,
    name: str,
    *,
    note: str = "",
    now: datetime | None = None,
    changed_by: str | None = None,
) -> Upserted:
    """Stop the entry ``name`` from its next occurrence (it stays, paused); ``note``, why,
    is kept with it until it is resumed."""
    return _set_enabled(app, name, False, _now(now), note, changed_by)


def resume(
    app: Celery, name: str, *, now: datetime | None = None, changed_by: str | None = None
) -> Upserted:
    """Run the paused entry ``name`` again from its next occurrence after now (those
    that fell while it was paused do not run); its pause note goes."""
    return _set_enabled(app, name, True, _now(now), changed_by=changed_by)


def run_now(
    app: Celery, name: str, *, now: datetime | None = None, changed_by: str | None = None
) -> str:
    """Send one extra occurrence of the entry ``name`` at once, with its own task id,
    leaving its schedule as it is; that task id. An entry whose message cannot be built
    (stored by other code) raises a ``ValueError``, as ``upsert`` refuses it."""
    moment = _now(now)
    with open_store(app) as store, acting(changed_by):
        found = _found(EntryRegistry(store.client, store.keys), name)
        OccurrenceWriter(app).check(found.entry, moment)
        task_id = str(send_occurrence(app, found.entry, moment).id)
        ChangeLog(store.client, store.keys).ran_now(name, found.version, task_id)
    return task_id


def get(app: Celery, name: str, *, now: datetime | None = None) -> EntryInfo | None:
    """The entry ``name`` with its next occurrences (those that run: after a change,
    from where its new version starts), or None."""
    moment = _now(now)
    with open_store(app) as store:
        found = EntryRegistry(store.client, store.keys).get(name)
        if found is None:
            return None
        history = EntryHistory(store.client, store.keys).read([name])
        after = OccurrenceWriter(app).run_starts(store, [found], moment)
    return _info(app, found, after[0], history[name])


def entries(app: Celery, *, now: datetime | None = None) -> list[EntryInfo]:
    """Every entry, by name, with its next occurrences (those that cannot be read are
    left out: ``listing`` says which)."""
    return listing(app, now=now).entries


@dataclass(frozen=True)
class Listing:
    """Every entry with its next occurrences, and the stored ones that cannot be read."""

    entries: list[EntryInfo]
    unreadable: list[Unreadable]


def listing(app: Celery, *, now: datetime | None = None) -> Listing:
    """Every entry, by name, with its next occurrences; and those that cannot be read
    (crafted or foreign bytes in the store), each with why, instead of an error."""
    moment = _now(now)
    with open_store(app) as store:
        scan = EntryRegistry(store.client, store.keys).scan()
        found = scan.entries
        history = EntryHistory(store.client, store.keys).read(e.entry.name for e in found)
        starts = OccurrenceWriter(app).run_starts(store, found, moment)
    infos: list[EntryInfo] = []
    unreadable = list(scan.unreadable)
    for each, after in zip(found, starts):
        try:
            infos.append(_info(app, each, after, history[each.entry.name]))
        except Exception as exc:  # a schedule whose next time overflows the calendar
            unreadable.append(Unreadable(each.entry.name, error_text(exc)))
    return Listing(infos, sorted(unreadable, key=lambda each: each.name))


@dataclass(frozen=True)
class Synced:
    """What ``sync_settings`` changed, by entry name."""

    written: list[str]
    removed: list[str]
    refused: list[str]  # its message cannot be built (logged; the store's entry is kept)


def sync_settings(app: Celery, beat_schedule: Mapping[str, Any], now: datetime) -> Synced:
    """Make the store's ``settings`` entries those of ``beat_schedule`` (beat's start).

    An entry whose definition is unchanged keeps its version, anchor and pause; a new or
    changed one is written (changed: from its next occurrence); a ``settings`` entry
    that left ``beat_schedule`` is removed. Entries made at run time are left alone,
    unless ``beat_schedule`` names one: then the settings' definition replaces it.
    Every entry's fields are checked before any is written; one whose message cannot be
    built (``OccurrenceWriter.check``) is logged and not written, and the others are."""
    wanted = {name: settings_entry(app, name, spec, now) for name, spec in beat_schedule.items()}
    writer = OccurrenceWriter(app)
    written: list[str] = []
    refused: list[str] = []
    with open_store(app) as store, acting(via="settings"):
        registry = EntryRegistry(store.client, store.keys)
        kept = {each.entry.name: each for each in registry.all()}
        for name, entry in wanted.items():
            old = kept.get(name)
            for _ in range(MOST_SYNC_TRIES):
                synced = _sync_one(registry, writer, old, entry, now)
                if synced != _RACED:
                    break
                old = registry.get(name)  # another beat wrote it meanwhile: decide again
            if synced == _REFUSED:
                refused.append(name)
            elif synced == _WRITTEN:
                written.append(name)
        gone = [
            each.entry
            for each in kept.values()
            if each.entry.origin == "settings" and each.entry.name not in wanted
        ]
        for entry in gone:
            version, removed = registry.remove(entry.name)
            EntryHistory(store.client, store.keys).forget(entry.name)
            if isinstance(removed, Versioned):
                writer.forget(removed.entry, version, now)
    return Synced(written, [entry.name for entry in gone], refused)


#: How many times ``sync_settings`` decides again about an entry another beat wrote meanwhile.
MOST_SYNC_TRIES = 5
#: What ``_sync_one`` did with an entry.
_KEPT, _WRITTEN, _REFUSED, _RACED = "kept", "written", "refused", "raced"


def _sync_one(
    registry: EntryRegistry,
    writer: OccurrenceWriter,
    old: Versioned | None,
    entry: PeriodicEntry,
    now: datetime,
) -> str:
    """Write the settings' ``entry`` over ``old`` (the stored one, as read) if it
    changed; ``_RACED`` if the stored one is no longer ``old`` (another beat synced it
    between the read and the write: then its anchor must be kept, not replaced)."""
    if old is not None and old.entry.origin == "settings":
        if _definition(old.entry) == _definition(entry):
            return _KEPT
        entry = replace(entry, enabled=old.entry.enabled, note=old.entry.note)
        if old.entry.rhythm() == entry.rhythm():
            entry = replace(entry, anchor=old.entry.anchor)
    try:
        writer.check(entry, now)
    except ValueError as exc:  # one bad entry stops no other
        logger.error("beat_schedule[%r] is not written: %s", entry.name, exc)
        return _REFUSED
    version = registry.put_if(entry, None if old is None else old.version)
    if version is None:
        return _RACED
    writer.advance(entry, version, now)
    return _WRITTEN


def settings_entry(app: Celery, name: str, spec: Mapping[str, Any], now: datetime) -> PeriodicEntry:
    """A ``beat_schedule`` item as an entry, in the app's zone unless it names its own
    (entry.py's ``entry_from_settings`` says which keys it takes)."""
    return entry_from_settings(name, spec, app_zone(app), now)


def _definition(entry: PeriodicEntry) -> dict[str, Any]:
    """What defines an entry, its anchor and pause (and the pause's note) left out."""
    kept = json.loads(entry.to_json())
    return {k: v for k, v in kept.items() if k not in ("anchor_ms", "enabled", "note")}


def _set_enabled(
    app: Celery,
    name: str,
    enabled: bool,
    moment: datetime,
    note: str = "",
    changed_by: str | None = None,
) -> Upserted:
    """Pause or resume: an entry resumed is checked as ``upsert`` checks it (a paused one
    sends nothing, so an entry that cannot be sent can always be paused)."""
    writer = OccurrenceWriter(app)
    with open_store(app) as store, acting(changed_by):
        registry = EntryRegistry(store.client, store.keys)
        entry = replace(_found(registry, name).entry, enabled=enabled, note=note)
        if enabled:
            writer.check(entry, moment)
        version, replaced = registry.put(entry, "resumed" if enabled else "paused")
    writer.advance(entry, version, moment)
    return Upserted(version, replaced)


def _found(registry: EntryRegistry, name: str) -> Versioned:
    found = registry.get(name)
    if found is None:
        raise KeyError(f"no periodic entry named {name!r}")
    return found


def _info(app: Celery, found: Versioned, after: datetime, history: History) -> EntryInfo:
    """``found`` with its next occurrences after ``after`` (writer.py's ``run_starts``)."""
    runs: list[datetime] = []
    occurrences = found.entry.occurrences() if found.entry.enabled else None
    last: datetime | None = after
    while occurrences is not None and last is not None and len(runs) < NEXT_LISTED:
        last = occurrences.after(last)
        runs += [last] if last is not None else []
    added_by = added_by_celery(app, found.entry.name, found.entry.origin)
    return EntryInfo(found.entry, found.version, runs, history, added_by)


def app_zone(app: Celery) -> str:
    """The app's ``timezone``, else UTC: an entry's zone unless it names one."""
    zone = app.conf.timezone
    return str(zone) if zone else "UTC"


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(timezone.utc)
