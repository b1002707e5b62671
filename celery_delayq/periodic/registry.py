"""Where periodic entries live: one hash in the store, beside the delayed messages.

``P:periodic`` maps each entry's name to ``"<version> <entry JSON>"`` (entry.py), and
``P:periodic:versions`` counts versions: each change of an entry takes the next one
(INCR), so a beat tells a changed entry from its mark in the queue (writer.py) and
writes it anew; a removal takes one too, for the tombstone it leaves in the queue.
Versions only go forward: each write is a compare-and-set of the entry's field, so of
two changes at once the one with the newer version stays, whole, whichever lands last,
and beats follow it. Beats syncing ``beat_schedule`` write with ``put_if`` instead,
so a beat starting beside another keeps the entry (and anchor) the other wrote.

Each change is recorded in the entry's change log (audit/), by whoever acts
(``audit.acting``), in the same script call as the change: a write that leaves the entry's
fields as they were (a repeated upsert) is not recorded.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union

import redis

from ..core.layout.keys import KeySpace
from ..core.lua import StoreScripts
from .audit import ChangeLog, current_actor
from .audit.changelog import field_changes, record_text
from .entry import MAX_NAME_LENGTH, PeriodicEntry, error_text

logger = logging.getLogger(__name__)


#: An entry as HGETALL returns it: (name, "<version> <entry JSON>").
Stored = tuple[Union[bytes, str], Union[bytes, str]]


@dataclass(frozen=True)
class Versioned:
    """An entry as the registry holds it, with the version of its last change."""

    entry: PeriodicEntry
    version: int


@dataclass(frozen=True)
class Unreadable:
    """A stored entry that cannot be read (crafted, or written by other code): its name
    (at most ``MAX_NAME_LENGTH`` characters, undecodable bytes replaced) and why."""

    name: str
    reason: str


#: One stored entry as read: the entry, or why it cannot be.
Read = Union[Versioned, Unreadable]


@dataclass(frozen=True)
class Scan:
    """Every stored entry: those read, by name, and those that cannot be."""

    entries: list[Versioned]
    unreadable: list[Unreadable]


class EntryRegistry:
    """The periodic entries of one store."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys

    def put(self, entry: PeriodicEntry, action: str | None = None) -> tuple[int, bool]:
        """Store ``entry`` under its name with a new version: (that version, whether an
        entry of that name was there). A change that took a newer version meanwhile and
        is stored already stays: this one counts as made before it. ``action``: what
        the change log calls it (default: created, or updated)."""
        text = entry.to_json()
        version, before, _ = self._change(entry.name, lambda version: f"{version} {text}", action)
        return version, before is not None

    def put_if(self, entry: PeriodicEntry, expected: int | None) -> int | None:
        """Store ``entry`` with a new version only if the entry of its name is still at
        version ``expected`` (None: no entry, or one that cannot be read): that version,
        or None if another process changed it first (two beats starting at once both
        sync ``beat_schedule``; the second must see the first's entry, not replace it)."""
        raw = self.client.hget(self.keys.periodic_entries, entry.name)
        found = _versioned(entry.name, raw)
        if (found.version if found is not None else None) != expected:
            return None
        version = self._version_above(expected or 0)
        written = self._swap(entry.name, raw, f"{version} {entry.to_json()}", version)
        return version if written else None

    def remove(self, name: str) -> tuple[int, Read | None]:
        """Forget the entry named ``name``: the version the removal takes (newer than the
        entry's, for the tombstone it leaves in the entry's queue: writer.py) and the
        entry removed (None: there was none, or a newer change came first and stays)."""
        version, before, written = self._change(name, lambda version: "", "removed")
        return version, _read(name, before) if written and before is not None else None

    def _change(
        self, name: str, value: Callable[[int], str], action: str | None
    ) -> tuple[int, bytes | str | None, bool]:
        """Write ``value(version)`` ("": delete) for the entry ``name`` with a new version,
        unless one newer is stored: (the version, what was there, whether it was
        written). Versions only go forward, whatever order changes land in."""
        version = self._version_above(0)
        while True:
            raw = self.client.hget(self.keys.periodic_entries, name)
            found = _versioned(name, raw)
            if found is not None and found.version > version:
                last = int(self.client.get(self.keys.periodic_versions) or 0)
                if found.version <= last:  # a change after this one: it stays
                    return version, raw, False
                version = self._version_above(found.version)  # no INCR gave it
            elif self._swap(name, raw, value(version), version, action):
                return version, raw, True

    def _version_above(self, floor: int) -> int:
        """A new version (INCR), above ``floor``: the counter jumps past a version it did
        not give (an entry written by hand, a counter deleted or set back)."""
        version = int(self.client.incr(self.keys.periodic_versions))
        if version <= floor:
            version = int(self.client.incrby(self.keys.periodic_versions, floor - version + 1))
        return version

    def _swap(
        self,
        name: str,
        read: bytes | str | None,
        value: str,
        version: int,
        action: str | None = None,
    ) -> bool:
        """Set (``value`` "": delete) the entry ``name`` if it is still ``read``, with
        the change's record: one slot on a Redis Cluster (unless the key prefix keeps the
        log out of it: then the record follows in a second call)."""
        keys, args = [self.keys.periodic_entries], [name, "" if read is None else read, value]
        record = _record(read, value, version, action)
        log = ChangeLog(self.client, self.keys)
        beside = record is not None and self.keys.changes_beside_entries
        if record is not None and beside:
            more_keys, more_args = log.script_part(name, record)
            keys, args = keys + more_keys, args + more_args
        scripts = StoreScripts(self.client)  # made here: a beat's pass only reads
        written = bool(scripts.swap_field(keys=keys, args=args))
        if written and record is not None and not beside:
            log.append(name, record)
        return written

    def get(self, name: str) -> Versioned | None:
        """The entry named ``name``, or None (also for one that cannot be read)."""
        return _versioned(name, self.client.hget(self.keys.periodic_entries, name))

    def all(self, parsed: dict[Stored, Read] | None = None) -> list[Versioned]:
        """Every readable entry, by name; unreadable ones are logged and left out."""
        return self.scan(parsed).entries

    def scan(self, parsed: dict[Stored, Read] | None = None) -> Scan:
        """Every entry, by name: those read, and those that cannot be (logged), each
        with why.

        ``parsed``: what was read last time, by the stored bytes, reused as it is (a beat
        reads every entry every pass; most have not changed, and an unreadable one is
        read and logged once); it is left holding this read's."""
        found = self.client.hgetall(self.keys.periodic_entries)
        known = {} if parsed is None else parsed
        read = {
            stored: known[stored] if stored in known else _read(*stored)
            for stored in sorted(found.items())
        }
        if parsed is not None:
            parsed.clear()
            parsed.update(read)
        return Scan(
            [each for each in read.values() if isinstance(each, Versioned)],
            [each for each in read.values() if isinstance(each, Unreadable)],
        )


def _record(read: bytes | str | None, value: str, version: int, action: str | None) -> str | None:
    """The change log's record of writing ``value`` over ``read`` (None: nothing to
    record, as an update that changes no field, or removing what is not there; removing
    a record that cannot be read is a change)."""
    if read is None and not value:
        return None
    old, new = _fields(read), _fields(value)
    actor, changes = current_actor(), field_changes(old, new)
    chosen = actor.action or action or ("created" if read is None else "updated")
    if chosen in UNCHANGED_UNRECORDED and not changes:  # a pause of a paused entry...
        return None
    unread = read is not None and not old  # bytes written by hand: no fields to compare
    return record_text(actor, chosen, changes, version, UNREAD_DETAIL if unread else "")


#: What a write that changes no field is not recorded as (unlike an import, which may
#: move only where its interval counts from).
UNCHANGED_UNRECORDED = frozenset({"updated", "paused", "resumed"})
#: The detail of a change over a stored record that is no entry (no fields compared).
UNREAD_DETAIL = "over a stored record that could not be read"


def _fields(stored: bytes | str | None) -> dict[str, Any]:
    """A stored entry's fields, as JSON holds them ({}: none, or unreadable)."""
    text = stored.decode("utf-8", "replace") if isinstance(stored, bytes) else stored or ""
    try:
        found = json.loads(text.partition(" ")[2]) if text else {}
    except Exception:  # crafted bytes, nested too deep...
        return {}
    return found if isinstance(found, dict) else {}


def read_version(text: str) -> int | None:
    """A version as the store writes it (entries here, marks in each queue): up to 18
    digits; None for anything else (crafted bytes)."""
    return int(text) if text.isdigit() and len(text) <= 18 and text.isascii() else None


def _versioned(name: str, raw: bytes | str | None) -> Versioned | None:
    """The stored entry, if there is one and it can be read."""
    found = None if raw is None else _read(name, raw)
    return found if isinstance(found, Versioned) else None


def _read(name: str | bytes, raw: bytes | str) -> Read:
    """One stored entry, or why it cannot be read: any failure of any type (bytes
    written by hand may be nested too deep for the parser, say) is a reason."""
    field = name.decode("utf-8", "replace") if isinstance(name, bytes) else name
    try:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        version, _, body = text.partition(" ")
        number = read_version(version)
        if number is None:
            raise ValueError(f"no version: {version[:20]!r}")
        entry = PeriodicEntry.from_json(body)
        if entry.name != field:
            raise ValueError(f"it names itself {entry.name[:50]!r}")
        return Versioned(entry, number)
    except Exception as exc:
        shown, reason = field[:MAX_NAME_LENGTH], error_text(exc)
        logger.warning("periodic entry %r cannot be read, and is left out: %s", shown, reason)
        return Unreadable(shown, reason)
