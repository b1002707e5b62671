"""The delayed store: every read and write of delayed messages in Redis goes through here.

Each queue keeps its messages as records (record.py) in one hash, and their due times in
small pages (lua/prelude.lua explains the layout, keys.py names the keys). Every change
is one atomic Lua script, so movers, producers and operators never need a lock.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis
from redis.commands.core import Script

from .keys import KeySpace, QueueKeys
from .record import Record, duplicate_key, message_key, task_id_of, task_key
from .scripts import StoreScripts

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScheduleCall:
    """The KEYS and ARGV of one ``schedule.lua`` call."""

    keys: list[str]
    args: list[Any]


@dataclass(frozen=True)
class MoveResult:
    """What one pass of moving did, by the Redis server's clock."""

    moved: int
    next_due_ms: int | None
    now_ms: int
    missing: int = 0
    max_lateness_ms: int = 0

    def seconds_until_next(self) -> float | None:
        if self.next_due_ms is None:
            return None
        return max(0.0, (self.next_due_ms - self.now_ms) / 1000.0)


@dataclass(frozen=True)
class QueueBacklog:
    """Pending delayed messages of one queue."""

    queue: str
    pending: int
    overdue: int
    next_due: float | None  # epoch seconds
    server_time: float = 0.0  # Redis clock when read, epoch seconds

    @property
    def lag(self) -> float:
        """Age of the oldest overdue message in seconds (0 when nothing is overdue)."""
        if self.next_due is None or not self.overdue:
            return 0.0
        return max(0.0, self.server_time - self.next_due)


@dataclass(frozen=True)
class PendingMessage:
    """One pending delayed message, as listed by ``DelayedStore.pending``."""

    queue: str
    key: bytes  # its message key (record.py)
    due: float  # epoch seconds
    record: Record

    @property
    def task_id(self) -> str:
        return task_id_of(self.key)


#: Upper bounds (ms) of the move-lateness histogram kept in each queue's stats hash.
LATENESS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)

#: Fields of the stats hash that number pages and duplicates (not counters to report).
NUMBERING_FIELDS = ("page_seq", "dup_seq")

#: Entries per page of due times; below Redis's default zset-max-listpack-entries (128),
#: so pages keep the compact encoding.
PAGE_SIZE = 120

#: A move stops after this many payload bytes, so one script call stays short (a few ms)
#: even when messages are large.
MOVE_BATCH_BYTES = 1 << 20


class DelayedStore:
    """Schedule, move, cancel and inspect delayed messages in one Redis."""

    def __init__(self, client: redis.Redis, keys: KeySpace, move_batch_size: int = 500) -> None:
        self.client = client
        self.keys = keys
        self.move_batch_size = move_batch_size
        self.scripts = StoreScripts.register(client)

    def schedule_call(
        self,
        *,
        queue: str,
        message_id: str,
        task_id: str | None,
        due_ms: int,
        destination: str,
        payload: bytes,
    ) -> ScheduleCall:
        """The KEYS and ARGV of ``schedule.lua`` for one message (rescue reuses them)."""
        keys = self.keys.for_queue(queue)
        record = Record(due_ms, destination, payload)
        return ScheduleCall(
            keys=[*keys.as_list(), self.keys.queues],
            args=[*self._page_args(keys), message_key(task_id, message_id), due_ms,
                  record.tail(self._own_list(queue)), queue, self.keys.wakeup_channel],
        )  # fmt: skip

    def schedule(self, **fields: Any) -> bool:
        """Store a message until it is due (fields as for ``schedule_call``); True when it
        is now its queue's earliest."""
        call = self.schedule_call(**fields)
        return bool(self.scripts.schedule(keys=call.keys, args=call.args))

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages."""
        keys = self.keys.for_queue(queue)
        moved, next_due, now, missing, max_late = self._run(
            self.scripts.move_due, keys, self.move_batch_size, MOVE_BATCH_BYTES,
            self._own_list(queue), *LATENESS_BUCKETS_MS,
        )  # fmt: skip
        next_due_ms = None if next_due < 0 else int(next_due)
        return MoveResult(int(moved), next_due_ms, int(now), int(missing), int(max_late))

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another, and a
        queue whose move fails (its destination key is not a list, say) is logged and
        skipped: its messages stay pending, and the other queues are still moved.
        """
        moved = missing = max_late = now = 0
        next_due: int | None = None
        active = self.queues()
        while active:
            full = []
            for queue in active:
                try:
                    result = self.move_due(queue)
                except redis.ResponseError as exc:
                    logger.warning("celery-delayq: cannot move queue %r: %s", queue, exc)
                    continue
                moved += result.moved
                missing += result.missing
                max_late = max(max_late, result.max_lateness_ms)
                now = max(now, result.now_ms)
                if (
                    result.moved + result.missing
                    and result.next_due_ms is not None
                    and result.next_due_ms <= result.now_ms
                ):
                    full.append(queue)  # the batch's size or bytes stopped it: more is due
                elif result.next_due_ms is not None:
                    next_due = min(result.next_due_ms, next_due or result.next_due_ms)
            active = full
        return MoveResult(moved, next_due, now or self.server_time_ms(), missing, max_late)

    def cancel(self, task_id: str) -> int:
        """Remove every pending message of ``task_id``; how many were removed."""
        removed = 0
        for queue in self.queues():
            keys = self.keys.for_queue(queue)
            removed += int(self._run(self.scripts.cancel, keys, task_key(task_id)))
        return removed

    def reschedule(
        self, task_id: str, due_ms: int, rewrite_payload: Callable[[bytes], bytes]
    ) -> int:
        """Give every pending message of ``task_id`` a new due time; how many changed.

        ``rewrite_payload`` updates the message itself (its ``eta`` header), so a
        worker receiving it early does not hold it until the old ETA.
        """
        changed = 0
        for queue in self.queues():
            keys = self.keys.for_queue(queue)
            for key in self._message_keys(keys, task_id):
                changed += self._replace(keys, key, due_ms, rewrite_payload)
        return changed

    def _message_keys(self, keys: QueueKeys, task_id: str) -> list[bytes]:
        """The message keys of a task: its own, and its duplicates' (if any)."""
        own = task_key(task_id)
        seqs = cast(Optional[bytes], self.client.hget(keys.duplicates, own))
        return [own, *(duplicate_key(own, seq) for seq in (seqs or b"").split())]

    def _replace(
        self,
        keys: QueueKeys,
        key: bytes,
        due_ms: int,
        rewrite_payload: Callable[[bytes], bytes],
    ) -> int:
        raw = cast(Optional[bytes], self.client.hget(keys.messages, key))
        if raw is None:
            return 0
        own_list = self._own_list(keys.queue)
        record = Record.decode(raw, own_list)
        new = Record(due_ms, record.destination, rewrite_payload(record.payload))
        return int(self._run(self.scripts.replace, keys, key, raw, new.encode(own_list), due_ms,
                             self.keys.wakeup_channel))  # fmt: skip

    def backlog(self) -> list[QueueBacklog]:
        """Pending, overdue and next due time per queue (queues with nothing pending too)."""
        queues = self.queues()
        now_ms = self.server_time_ms()
        counts = self._counts(queues, ["-inf", now_ms + 1])
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.hlen(self.keys.for_queue(queue).messages)
            pending = pipe.execute()
        return [
            QueueBacklog(queue, int(waiting), int(overdue),
                         None if next_due < 0 else next_due / 1000.0, now_ms / 1000.0)
            for queue, waiting, (next_due, overdue) in zip(queues, pending, counts)
        ]  # fmt: skip

    def _counts(self, queues: list[str], edges_ms: list[Any]) -> list[list[int]]:
        """Per queue: next due ms (-1 if none), then counts in [edges[i], edges[i + 1])."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys.for_queue(queue)
                self._run(self.scripts.count, keys, *edges_ms, client=pipe)
            return [[int(n) for n in reply] for reply in pipe.execute()]

    def pending(
        self,
        *,
        queue: str | None = None,
        due_after: float | None = None,
        due_before: float | None = None,
        limit: int = 100,
        newest_first: bool = False,
    ) -> list[PendingMessage]:
        """Pending messages in due order (latest first with ``newest_first``), at most
        ``limit``, optionally of one queue and within a due-time window (epoch seconds)."""
        low = "-inf" if due_after is None else repr(due_after * 1000)
        high = "+inf" if due_before is None else repr(due_before * 1000)
        found: list[PendingMessage] = []
        for name in [queue] if queue else self.queues():
            keys = self.keys.for_queue(name)
            order = "1" if newest_first else "0"
            flat = self._run(self.scripts.pending, keys, low, high, limit, order)
            entries = [(key, int(float(due))) for key, due in zip(flat[::2], flat[1::2])]
            found.extend(self._with_records(keys, entries))
        found.sort(key=lambda message: message.due, reverse=newest_first)
        return found[:limit]

    def find(self, task_id: str) -> list[PendingMessage]:
        """Every pending message of one Celery task id."""
        found: list[PendingMessage] = []
        for name in self.queues():
            keys = self.keys.for_queue(name)
            keyed: list[tuple[bytes, int | None]] = [
                (key, None) for key in self._message_keys(keys, task_id)
            ]
            found.extend(self._with_records(keys, keyed))
        return sorted(found, key=lambda message: message.due)

    def _with_records(
        self, keys: QueueKeys, entries: Sequence[tuple[bytes, int | None]]
    ) -> list[PendingMessage]:
        """The messages of these keys that still have a record (due from the page entry
        when known, else from the record)."""
        if not entries:
            return []
        own_list = self._own_list(keys.queue)
        raws: list[Any] = self.client.hmget(keys.messages, [key for key, _ in entries])
        found = []
        for (key, due_ms), raw in zip(entries, raws):
            if raw is not None:
                record = Record.decode_or_raw(raw, own_list, due_ms or 0)
                due = record.due_ms if due_ms is None else due_ms
                found.append(PendingMessage(keys.queue, key, due / 1000.0, record))
        return found

    def purge(self, queue: str) -> int:
        """Delete every pending message of ``queue`` at once; how many there were."""
        keys = self.keys.for_queue(queue)
        return int(self._run(self.scripts.purge, keys, queue, extra_key=self.keys.queues))

    def stats(self, queue: str) -> dict[str, int]:
        """The counters of one queue (see ``keys``): scheduled, moved, cancelled, lateness."""
        raw: dict[bytes, bytes] = self.client.hgetall(self.keys.for_queue(queue).stats)  # type: ignore[assignment]
        counters = {key.decode(): int(value) for key, value in raw.items()}
        return {k: v for k, v in counters.items() if k not in NUMBERING_FIELDS}

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        """Per queue, how many messages fall due in each window between ``edges``
        (epoch seconds, ascending): counts for [edges[0], edges[1]), ... ."""
        queues = self.queues()
        edges_ms = [
            round(edge * 1000) if math.isfinite(edge) else ("+inf" if edge > 0 else "-inf")
            for edge in edges
        ]
        counts = self._counts(queues, edges_ms)
        return {queue: reply[1:] for queue, reply in zip(queues, counts)}

    def page_entries(self, queue: str) -> dict[bytes, tuple[bytes, int]]:
        """Every page entry of a queue, message key -> (page number, due ms); for
        consistency checks."""
        keys = self.keys.for_queue(queue)
        entries: dict[bytes, tuple[bytes, int]] = {}
        pages: list[bytes] = self.client.zrange(keys.pages, 0, -1)  # type: ignore[assignment]
        with self.client.pipeline(transaction=False) as pipe:  # one round trip, not one a page
            for page in pages:
                pipe.zrange(keys.page(page), 0, -1, withscores=True)
            for page, page_entries in zip(pages, pipe.execute()):
                entries.update((key, (page, int(due))) for key, due in page_entries)
        return entries

    def repair(self, queue: str, key: bytes, seen_page: bytes | None) -> bool:
        """Schedule a message at its record's due time, dropping its entry from
        ``seen_page`` (if any); False when it has no readable record (nothing left)."""
        keys = self.keys.for_queue(queue)
        return bool(self._run(self.scripts.repair, keys, key, seen_page or ""))

    @staticmethod
    def _page_args(keys: QueueKeys) -> list[Any]:
        """ARGV[1] and ARGV[2] of every per-queue script (lua/prelude.lua)."""
        return [keys.page_prefix, PAGE_SIZE]

    def _run(
        self,
        script: Script,
        keys: QueueKeys,
        *args: Any,
        extra_key: str | None = None,
        client: Any = None,
    ) -> Any:
        """Run a per-queue script: KEYS are the queue's keys (then ``extra_key``), ARGV
        the page arguments, then ``args``."""
        extra = [extra_key] if extra_key else []
        return script(keys=[*keys.as_list(), *extra], args=[*self._page_args(keys), *args],
                      client=client)  # fmt: skip

    def _own_list(self, queue: str) -> str:
        """The kombu list of the queue itself (the destination most records have)."""
        return self.keys.destination(queue)

    def heartbeat(self, mover_id: str, info: dict[str, Any]) -> None:
        """Record that a mover is alive (``celery delayq status`` lists these)."""
        self.client.hset(self.keys.movers, mover_id, json.dumps(info))

    def forget_mover(self, mover_id: str) -> None:
        self.client.hdel(self.keys.movers, mover_id)

    def movers(self) -> list[dict[str, Any]]:
        """Every mover heartbeat, alive or stale; ``last_seen`` is Redis time in seconds."""
        beats = self.client.hgetall(self.keys.movers)
        return sorted((json.loads(info) for info in beats.values()),
                      key=lambda beat: beat.get("last_seen", 0), reverse=True)  # fmt: skip

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000
