"""Periodic entries' occurrences written ahead into the store (lua/write_ahead.lua).

A beat that finds an entry's next occurrences unwritten stores them as delayed messages
in one atomic call that also moves the entry's mark from the value the beat read to a new
one. If another beat moved the mark first, the call writes nothing and returns the mark it
found, so of any number of beats, one writes each occurrence. The mark is the caller's
text (periodic/records.py says what it holds), led by the entry's version: the store
also refuses a mark of a lower version than the one it finds, so a beat that read the
entry before a change never writes the old version back over the new one. A removal
leaves a tombstone mark (``removed``) for the same reason, forgotten after
``gone_kept_ms``.

An entry's mark and occurrences live in one shard of its queue, chosen by the entry's
name, so each call touches one Redis Cluster slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..layout.keys import QueueKeys
from .state import StoreState
from .writes import Scheduled, Writes

#: How long a removed entry's tombstone mark is kept (ms): far longer than a writer may
#: go on writing an entry it read (periodic/writer.py, ``MOST_READ_AGE``), so no writer
#: still holds the removed entry when its tombstone is forgotten.
GONE_KEPT_MS = 86_400_000


@dataclass(frozen=True)
class AheadOutcome:
    """What one write-ahead call did."""

    written: bool  # False: the mark was not the one read, and nothing was written
    mark: str | None  # the entry's mark now: the new one, or the one found
    stored: int = 0  # occurrences stored
    withdrawn: int = 0  # occurrences written ahead before and withdrawn, still pending
    stale: bool = False  # not written: the mark found is of a newer version than the new


class WriteAhead:
    """Writes periodic occurrences ahead, each entry's under a compare-and-set of its mark."""

    def __init__(self, state: StoreState, writes: Writes) -> None:
        self.state = state
        self.writes = writes

    def keys_of(self, queue: str, entry: str) -> QueueKeys:
        """The shard of ``queue`` that holds ``entry``'s mark and occurrences."""
        return self.state.keys.shard_of(queue, entry.encode("utf-8", "surrogatepass"))

    def mark(self, queue: str, entry: str) -> str | None:
        """The entry's mark in ``queue``, or None when it has none."""
        found = self.state.client.hget(self.keys_of(queue, entry).periodic_marks, entry)
        return None if found is None else _text(found)

    def marks(self, entries: Sequence[tuple[str, str]]) -> list[str | None]:
        """The marks of many ``(queue, entry)`` at once: one HMGET per hash of marks, in
        one pipeline (a beat's pass reads every entry's)."""
        by_hash: dict[str, list[int]] = {}
        for at, (queue, entry) in enumerate(entries):
            by_hash.setdefault(self.keys_of(queue, entry).periodic_marks, []).append(at)
        found: list[str | None] = [None] * len(entries)
        if not by_hash:
            return found
        with self.state.client.pipeline(transaction=False) as pipe:
            for key, places in by_hash.items():
                pipe.hmget(key, [entries[at][1] for at in places])
            replies = pipe.execute()
        for places, values in zip(by_hash.values(), replies):
            for at, value in zip(places, values):
                found[at] = None if value is None else _text(value)
        return found

    def write(
        self,
        queue: str,
        entry: str,
        read_mark: str | None,
        new_mark: str | None,
        occurrences: Sequence[Scheduled] = (),
        withdraw_after_ms: int | None = None,
        gone_kept_ms: int | None = None,
    ) -> AheadOutcome:
        """If the entry's mark is still ``read_mark`` and of no newer version than
        ``new_mark``: withdraw the occurrences written ahead before that are due after
        ``withdraw_after_ms`` (None: none; 0: all), store ``occurrences`` (messages of
        ``queue``) and set the mark to ``new_mark`` (None: forget the entry), in one
        atomic call. Those due by then stay: they are the movers' to deliver, the entry's
        change taking effect from the next one. Tombstones of this shard older than
        ``gone_kept_ms`` (None: ``GONE_KEPT_MS``) are forgotten by the same call."""
        keys = self.keys_of(queue, entry)
        triples: list[Any] = []
        for message in occurrences:
            if message.queue != queue:
                raise ValueError(f"an occurrence of {queue!r} is for queue {message.queue!r}")
            triples += (message.key, message.due_ms, message.record(keys.own_list))
        self.writes.register([queue])
        if occurrences:
            self.writes.register_off_shard(queue)  # in the entry's shard, not the task's
        reply = self.state.scripts.write_ahead(
            keys=[
                *keys.as_list(),
                keys.periodic_marks,
                keys.periodic_ahead,
                keys.periodic_gone,
                *self.state.registry_in_scripts(),
            ],
            args=[
                *keys.page_args(),
                entry,
                read_mark or "",
                new_mark or "",
                "" if withdraw_after_ms is None else withdraw_after_ms,
                GONE_KEPT_MS if gone_kept_ms is None else gone_kept_ms,
                self.state.keys.wakeup_channel,
                queue,
                len(occurrences),
                *triples,
            ],
        )
        if not int(reply[0]):
            found = _text(reply[1]) if reply[1] else None
            return AheadOutcome(written=False, mark=found, stale=bool(int(reply[2])))
        return AheadOutcome(True, new_mark, stored=int(reply[1]), withdrawn=int(reply[2]))


def _text(value: Any) -> str:
    """A mark as Redis returns it (bytes), as text; crafted bytes are kept, replaced."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
