"""Where periodic entries live: one hash in the store, beside the delayed messages.

``P:periodic`` maps each entry's name to ``"<version> <entry JSON>"`` (entry.py), and
``P:periodic:versions`` counts versions: each change of an entry takes the next one
(INCR), so a beat tells a changed entry from its mark in the queue (writer.py) and
writes it anew. Two changes at once both land; the last written wins, whole, with its own
version, and beats follow it. Beats syncing ``beat_schedule`` write with ``put_if`` instead,
so a beat starting beside another keeps the entry (and anchor) the other wrote.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Union

import redis
from redis.cluster import RedisCluster

from ..core.layout.keys import KeySpace
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

    def put(self, entry: PeriodicEntry) -> tuple[int, bool]:
        """Store ``entry`` under its name with a new version: (that version, whether an
        entry of that name was replaced)."""
        version = int(self.client.incr(self.keys.periodic_versions))
        added = self.client.hset(
            self.keys.periodic_entries, entry.name, f"{version} {entry.to_json()}"
        )
        return version, not added

    def put_if(self, entry: PeriodicEntry, expected: int | None) -> int | None:
        """Store ``entry`` with a new version only if the entry of its name is still at
        version ``expected`` (None: no entry, or one that cannot be read): that version,
        or None if another process changed it first (two beats starting at once both
        sync ``beat_schedule``; the second must see the first's entry, not replace it)."""
        key = self.keys.periodic_entries
        if isinstance(self.client, RedisCluster):
            # redis-py's cluster pipeline takes no WATCH: checked, then written (a narrow
            # window remains on a cluster store)
            found = self.get(entry.name)
            if (found.version if found is not None else None) != expected:
                return None
            return self.put(entry)[0]
        with self.client.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(key)
                raw = pipe.hget(key, entry.name)
                found = None if raw is None else _read(entry.name, raw)
                current = found.version if isinstance(found, Versioned) else None
                if current != expected:
                    return None
                version = int(pipe.incr(self.keys.periodic_versions))
                pipe.multi()
                pipe.hset(key, entry.name, f"{version} {entry.to_json()}")
                pipe.execute()
            except redis.WatchError:
                return None
        return version

    def get(self, name: str) -> Versioned | None:
        """The entry named ``name``, or None (also for one that cannot be read)."""
        raw = self.client.hget(self.keys.periodic_entries, name)
        found = None if raw is None else _read(name, raw)
        return found if isinstance(found, Versioned) else None

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

    def delete(self, name: str) -> bool:
        """Forget the entry named ``name``; whether there was one."""
        return bool(self.client.hdel(self.keys.periodic_entries, name))


def read_version(text: str) -> int | None:
    """A version as the store writes it (entries here, marks in each queue): up to 18
    digits; None for anything else (crafted bytes)."""
    return int(text) if text.isdigit() and len(text) <= 18 and text.isascii() else None


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
