"""The delayed store: every read and write of delayed messages in Redis goes through here.

A delayed message is kept as a *record*: the destination kombu list and the Celery
task id, length-prefixed, followed by the payload bytes exactly as kombu would have
pushed them. The mover's Lua script splits the record and pushes the payload
unchanged, so no JSON is ever decoded or re-encoded inside Redis.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis

from .keys import KeySpace, QueueKeys
from .scripts import StoreScripts


@dataclass(frozen=True)
class Record:
    """One stored delayed message."""

    destination: str
    task_id: str
    payload: bytes

    def encode(self) -> bytes:
        destination, task_id = self.destination.encode(), self.task_id.encode()
        header = b"%d:%s%d:%s" % (len(destination), destination, len(task_id), task_id)
        return header + self.payload

    @classmethod
    def decode(cls, raw: bytes) -> Record:
        fields: list[bytes] = []
        pos = 0
        for _ in range(2):
            colon = raw.index(b":", pos)
            length = int(raw[pos:colon])
            fields.append(raw[colon + 1 : colon + 1 + length])
            pos = colon + 1 + length
        return cls(fields[0].decode(), fields[1].decode(), raw[pos:])

    @classmethod
    def decode_or_raw(cls, raw: bytes) -> Record:
        """For display: a record this store did not write is shown whole, as payload."""
        try:
            return cls.decode(raw)
        except ValueError:
            return cls("", "", raw)


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
    message_id: str
    due: float  # epoch seconds
    record: Record

    @property
    def task_id(self) -> str:
        return self.record.task_id


#: Upper bounds (ms) of the move-lateness histogram kept in each queue's stats hash.
LATENESS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)


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
        record = Record(destination, task_id or "", payload)
        keys = self.keys.for_queue(queue)
        return ScheduleCall(
            keys=[*keys.as_list(), self.keys.queues],
            args=[message_id, due_ms, record.encode(), task_id or "", queue,
                  self.keys.wakeup_channel],
        )  # fmt: skip

    def schedule(self, **fields: Any) -> bool:
        """Store a message until it is due (fields as for ``schedule_call``); True when it
        is now its queue's earliest."""
        call = self.schedule_call(**fields)
        return bool(self.scripts.schedule(keys=call.keys, args=call.args))

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages."""
        moved, next_due, now, missing, max_late = self.scripts.move_due(
            keys=self.keys.for_queue(queue).as_list(),
            args=[self.move_batch_size, *LATENESS_BUCKETS_MS],
        )
        next_due_ms = None if next_due < 0 else int(next_due)
        return MoveResult(int(moved), next_due_ms, int(now), int(missing), int(max_late))

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another.
        """
        moved = missing = max_late = now = 0
        next_due: int | None = None
        active = self.queues()
        while active:
            full = []
            for queue in active:
                result = self.move_due(queue)
                moved += result.moved
                missing += result.missing
                max_late = max(max_late, result.max_lateness_ms)
                now = max(now, result.now_ms)
                if result.moved + result.missing >= self.move_batch_size:
                    full.append(queue)
                elif result.next_due_ms is not None:
                    next_due = min(result.next_due_ms, next_due or result.next_due_ms)
            active = full
        return MoveResult(moved, next_due, now or self.server_time_ms(), missing, max_late)

    def cancel(self, task_id: str) -> int:
        """Remove every pending message of ``task_id``; how many were removed."""
        return sum(
            int(self.scripts.cancel(keys=self.keys.for_queue(queue).as_list(), args=[task_id]))
            for queue in self.queues()
        )

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
            for message_id in self._message_ids(keys, task_id):
                changed += self._replace(keys, message_id, due_ms, rewrite_payload)
        return changed

    def _message_ids(self, keys: QueueKeys, task_id: str) -> list[bytes]:
        ids = cast(Optional[bytes], self.client.hget(keys.task_index, task_id))
        return ids.split() if ids else []

    def _replace(
        self,
        keys: QueueKeys,
        message_id: bytes,
        due_ms: int,
        rewrite_payload: Callable[[bytes], bytes],
    ) -> int:
        raw = cast(Optional[bytes], self.client.hget(keys.messages, message_id))
        if raw is None:
            return 0
        record = Record.decode(raw)
        new = Record(record.destination, record.task_id, rewrite_payload(record.payload))
        return int(
            self.scripts.replace(
                keys=[keys.due, keys.messages],
                args=[message_id, raw, new.encode(), due_ms, self.keys.wakeup_channel],
            )
        )

    def backlog(self) -> list[QueueBacklog]:
        """Pending, overdue and next due time per queue (queues with nothing pending too)."""
        queues = self.queues()
        now_ms = self.server_time_ms()
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys.for_queue(queue)
                pipe.zcard(keys.due)
                pipe.zcount(keys.due, "-inf", now_ms)
                pipe.zrange(keys.due, 0, 0, withscores=True)
            replies = pipe.execute()
        backlog = []
        for i, queue in enumerate(queues):
            pending, overdue, head = replies[3 * i : 3 * i + 3]
            next_due = head[0][1] / 1000.0 if head else None
            backlog.append(
                QueueBacklog(queue, int(pending), int(overdue), next_due, now_ms / 1000.0)
            )
        return backlog

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
        low = "-inf" if due_after is None else due_after * 1000
        high = "+inf" if due_before is None else due_before * 1000
        found: list[PendingMessage] = []
        for name in [queue] if queue else self.queues():
            keys = self.keys.for_queue(name)
            entries: Any
            if newest_first:
                entries = self.client.zrevrangebyscore(
                    keys.due, high, low, start=0, num=limit, withscores=True
                )
            else:
                entries = self.client.zrangebyscore(
                    keys.due, low, high, start=0, num=limit, withscores=True
                )
            found.extend(self._with_records(name, keys, entries))
        found.sort(key=lambda message: message.due, reverse=newest_first)
        return found[:limit]

    def find(self, task_id: str) -> list[PendingMessage]:
        """Every pending message of one Celery task id."""
        found: list[PendingMessage] = []
        for name in self.queues():
            keys = self.keys.for_queue(name)
            ids = self._message_ids(keys, task_id)
            if ids:
                scores: list[float | None] = self.client.zmscore(keys.due, ids)  # type: ignore[arg-type]
                entries = [(i, score) for i, score in zip(ids, scores) if score is not None]
                found.extend(self._with_records(name, keys, entries))
        return sorted(found, key=lambda message: message.due)

    def _with_records(
        self, queue: str, keys: QueueKeys, entries: list[tuple[bytes, float]]
    ) -> list[PendingMessage]:
        if not entries:
            return []
        raws: list[Any] = self.client.hmget(keys.messages, [i for i, _ in entries])
        return [
            PendingMessage(queue, message_id.decode(), score / 1000.0, Record.decode_or_raw(raw))
            for (message_id, score), raw in zip(entries, raws)
            if raw is not None
        ]

    def purge(self, queue: str) -> int:
        """Delete every pending message of ``queue`` at once; how many there were."""
        keys = self.keys.for_queue(queue)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.zcard(keys.due)
            pipe.delete(keys.due, keys.messages, keys.task_index)
            pipe.srem(self.keys.queues, queue)
            count = pipe.execute()[0]
        return int(count)

    def stats(self, queue: str) -> dict[str, int]:
        """The counters of one queue (see ``keys``): scheduled, moved, cancelled, lateness."""
        raw: dict[bytes, bytes] = self.client.hgetall(self.keys.for_queue(queue).stats)  # type: ignore[assignment]
        return {key.decode(): int(value) for key, value in raw.items()}

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        """Per queue, how many messages fall due in each window between ``edges``
        (epoch seconds, ascending): counts for [edges[0], edges[1]), ... ."""
        queues = self.queues()
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                due = self.keys.for_queue(queue).due
                for low, high in zip(edges, edges[1:]):
                    pipe.zcount(due, low * 1000, f"({high * 1000}")
            counts = pipe.execute()
        width = len(edges) - 1
        return {q: counts[i * width : (i + 1) * width] for i, q in enumerate(queues)}

    def repair_entry(self, queue: str, message_id: bytes, due_ms: int) -> bool:
        """Add a missing schedule entry (at ``due_ms``) or drop one without a record."""
        keys = self.keys.for_queue(queue)
        return bool(self.scripts.repair_entry(keys=[keys.due, keys.messages],
                                              args=[message_id, due_ms]))  # fmt: skip

    def repair_task_index(self, queue: str, task_id: str, message_ids: list[bytes]) -> int:
        """Index exactly the existing messages of ``task_id`` (known ones plus these)."""
        keys = self.keys.for_queue(queue)
        return int(self.scripts.repair_index(keys=[keys.messages, keys.task_index],
                                             args=[task_id, *message_ids]))  # fmt: skip

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
