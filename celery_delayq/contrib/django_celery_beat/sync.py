"""django-celery-beat's rows made the store's ``django`` entries, by any number of beats.

A beat syncs on its first pass, whenever ``PeriodicTasks.last_update`` (django-celery-beat's
own change tracking, which every save and delete of a row or a schedule moves) differs from
the last it synced, and at least every 5 minutes as ``DatabaseScheduler`` does (rows
changed by a bulk ``update()`` move no ``last_update``). Each row becomes an entry
(rows.py): a new or changed one is written, with the next version, from its next
occurrence; an unchanged one is left as it is (its version, its anchor, its occurrences
written ahead); a disabled row's entry is paused; a row that cannot be an entry is logged
and counted, its entry paused, and the other rows go on; an entry whose row is gone is
removed. The rows are the truth for their names: an entry made at run time under a row's
name is replaced; an entry of ``beat_schedule`` is not (each beat's start would write it
back), and the row of its name is refused.

Two beats that sync at once would each write what they read, and the one that read first
could write last, putting back an interval the admin had just changed. So a sync holds a
short lock in the store (``<periodic entries key>:django-sync``), and reads the rows only
once it holds it: the syncs of all beats follow one another, each from rows at least as new
as the last. The lock orders the syncs only; writing occurrences ahead needs none, and a
beat that finds it held syncs on a later pass. The lock expires (a beat killed mid-sync
holds up the others' syncs ``LOCK_SECONDS`` at most, and the next sync writes what it left
undone) and is released by its owner only (redis-py's token lock); it is renewed, with a
check that this beat still holds it, before each write and each removal: a beat that lost
it (stalled past its expiry while another synced newer rows) writes nothing more and syncs
again on a later pass. Each write is also a compare-and-set on the entry's version
(``EntryRegistry.put_if``): a write that lands meanwhile (an upsert, a ``beat_schedule``
sync) is read and decided on again, never overwritten unseen.
"""

from __future__ import annotations

import logging
import time
from contextlib import suppress
from dataclasses import replace
from datetime import datetime
from typing import Any

from celery import Celery
from django_celery_beat.models import PeriodicTask, PeriodicTasks
from redis.exceptions import LockError

from ...config.errors import STORE_OUTAGES
from ...core.store import DelayedStore
from ...periodic.audit import ChangeLog, ChangeRecord, acting
from ...periodic.entry import PeriodicEntry, error_text
from ...periodic.manage import Synced, remove
from ...periodic.registry import EntryRegistry, Versioned
from ...periodic.writer import OccurrenceWriter
from .editors import row_editor
from .rows import ORIGIN, row_entry

__all__ = ["AdminSync"]

logger = logging.getLogger(__name__)

#: Most seconds between two syncs, changes or not (as ``DatabaseScheduler`` from 2.8 on).
FULL_SYNC_SECONDS = 300.0
#: Most seconds a sync holds the lock without renewing it: a beat that dies holding it
#: holds up the others' syncs this long at most (so an admin change waits this much more,
#: once), and a sync renews it before every write, so a short one costs nothing.
LOCK_SECONDS = 15.0
#: How many times one row is decided again after another writer changed its entry first.
MOST_TRIES = 5
#: What ``_write`` did with an entry.
_KEPT, _WRITTEN = "kept", "written"
#: ``last_update`` before the first sync (None is what a site with no change yet has).
_NEVER = object()


class AdminSync:
    """The sync of one beat: when it is due, and what the last one left."""

    def __init__(self, app: Celery, writer: OccurrenceWriter) -> None:
        self.app = app
        self.writer = writer
        self.stamp: object = _NEVER  # the ``last_update`` the last sync read
        self.synced_at = 0.0  # when it ran (``time.monotonic``)
        #: Why each row was refused, by name, as of the last sync (each logged once).
        self.refused: dict[str, str] = {}
        #: The enabled rows whose entries are in the store, by name (runs.py copies their
        #: last runs back onto them).
        self.rows: list[PeriodicTask] = []

    def due(self) -> bool:
        """Whether the rows changed since the last sync (or it is time for a full one)."""
        if self.stamp is _NEVER or PeriodicTasks.last_change() != self.stamp:
            return True
        return time.monotonic() - self.synced_at >= FULL_SYNC_SECONDS

    def apply(self, store: DelayedStore, producer: Any, now: datetime) -> Synced | None:
        """Make the store's ``django`` entries those of the rows; None if another beat's
        sync holds the lock (this one is tried again next pass)."""
        key = f"{store.keys.periodic_entries}:django-sync"
        lock = store.client.lock(key, timeout=LOCK_SECONDS, blocking=False, thread_local=False)
        if not lock.acquire():
            return None
        try:
            # the stamp before the rows: a change between the two is synced again next pass
            stamp = PeriodicTasks.last_change()
            rows = list(PeriodicTask.objects.select_related(*_SCHEDULES))
            synced = _Run(self, store, producer, now, lock).over(rows)
        except LockError:  # lost past its time: another beat's sync may have newer rows
            logger.warning("django-celery-beat rows: the sync lost its lock; stopped, retried")
            return None
        finally:
            _release(lock)
        self.stamp, self.synced_at = stamp, time.monotonic()
        return synced


def _release(lock: Any) -> None:
    """Release ``lock`` if this beat still holds it (never another beat's)."""
    with suppress(LockError):  # expired: another beat's sync may hold it now
        lock.release()


#: What ends a sync: its lock lost, or Redis out of reach (a later pass syncs again).
_STOPS: tuple[type[Exception], ...] = (LockError, *STORE_OUTAGES)
#: The schedules a row may point to, read with it in one query.
_SCHEDULES = ("interval", "crontab", "solar", "clocked")


class _Run:
    """One sync, under the lock."""

    def __init__(
        self, sync: AdminSync, store: DelayedStore, producer: Any, now: datetime, lock: Any
    ) -> None:
        self.sync, self.producer, self.now, self.lock = sync, producer, now, lock
        self.registry = EntryRegistry(store.client, store.keys)
        self.renewed = time.monotonic()
        self.written: list[str] = []
        self.refused: dict[str, str] = {}

    def over(self, rows: list[PeriodicTask]) -> Synced:
        stored = {each.entry.name: each for each in self.registry.all()}
        kept: list[PeriodicTask] = []
        for row in rows:
            self._renew()
            try:
                if self._row(row, stored.get(row.name)) and row.enabled:
                    kept.append(row)
            except _STOPS:
                raise  # the lock lost, or Redis down: this sync ends, a later pass syncs again
            except Exception as exc:  # one row stops no other
                self._refuse(row.name, error_text(exc))
        names = {row.name for row in rows}
        gone = [n for n, e in stored.items() if e.entry.origin == ORIGIN and n not in names]
        for name in gone:
            self._renew(hold=True)
            with acting("admin", "admin", "row deleted"):
                remove(self.sync.app, name, now=self.now)
        self._log_refusals()
        self.sync.rows = kept
        return Synced(self.written, gone, sorted(self.refused))

    def _row(self, row: PeriodicTask, old: Versioned | None) -> bool:
        """Sync one row; whether its entry is in the store as the row says."""
        try:
            return self._write(row_entry(self.sync.app, row, self.now), old, row)
        except LockError:
            raise  # a ValueError too, but not the row's
        except ValueError as exc:  # it cannot be an entry, or its messages cannot be sent
            self._refuse(row.name, str(exc))
            if old is not None and old.entry.origin == ORIGIN and old.entry.enabled:
                self._write(replace(old.entry, enabled=False), old, row)  # runs as said, or not
            return False

    def _write(self, entry: PeriodicEntry, old: Versioned | None, row: PeriodicTask) -> bool:
        """Store ``entry`` over ``old`` (as read) unless it is the same; whether it is
        stored (its change recorded as ``row``'s editor's, through the admin). Another
        writer's change meanwhile is read, and decided on again. A ``ValueError`` if its
        messages cannot be sent (``OccurrenceWriter.check``)."""
        for _ in range(MOST_TRIES):
            if old is not None:
                if not self._may_replace(old.entry):
                    return False
                if replace(entry, anchor=old.entry.anchor).to_json() == old.entry.to_json():
                    return True  # unchanged: its occurrences go on as written
                if entry.rhythm() == old.entry.rhythm():
                    entry = replace(entry, anchor=old.entry.anchor)  # same rhythm, same times
            if entry.enabled:  # a paused entry sends nothing: it can always be paused
                self.sync.writer.check(entry, self.now)
            self._renew(hold=True)
            who, detail = row_editor(row, self._admin_details(entry.name))
            with acting(who, "admin", detail):
                version = self.registry.put_if(entry, None if old is None else old.version)
            if version is not None:
                self.sync.writer.advance(entry, version, self.now, self.producer)
                self.written.append(entry.name)
                return True
            old = self.registry.get(entry.name)
        raise RuntimeError(f"its entry kept changing under {MOST_TRIES} writes in a row")

    def _admin_details(self, name: str) -> list[str]:
        """The details of the records of ``name``'s changes made through the admin."""
        log = ChangeLog(self.registry.client, self.registry.keys).read(name)
        return [e.detail for e in log if isinstance(e, ChangeRecord) and e.via == "admin"]

    def _may_replace(self, old: PeriodicEntry) -> bool:
        """Whether a row may replace the entry ``old`` of its name: one of its own, or one
        made at run time (the row is the truth), not one of ``beat_schedule``."""
        if old.origin == "settings":
            self._refuse(old.name, "an entry of beat_schedule has that name")
            return False
        if old.origin != ORIGIN:
            logger.warning("periodic entry %r made at run time: replaced by its row", old.name)
        return True

    def _refuse(self, name: str, reason: str) -> None:
        self.refused[name] = reason

    def _log_refusals(self) -> None:
        """Log each refusal once, until its reason changes."""
        for name, reason in self.refused.items():
            if self.sync.refused.get(name) != reason:
                logger.error("django-celery-beat row %r is not run: %s", name, reason)
        self.sync.refused = dict(self.refused)

    def _renew(self, hold: bool = False) -> None:
        """Keep the lock while a long sync goes on, and before a write (``hold``): a
        ``LockNotOwnedError`` if this beat no longer holds it (nothing more is written)."""
        if hold or time.monotonic() - self.renewed > LOCK_SECONDS / 3:
            self.lock.reacquire()
            self.renewed = time.monotonic()
