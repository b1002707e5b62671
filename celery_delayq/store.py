"""The delayed store: every read and write of delayed messages in Redis goes through here.

A delayed message is kept as a *record*: the destination kombu list and the Celery
task id, length-prefixed, followed by the payload bytes exactly as kombu would have
pushed them. The mover's Lua script splits the record and pushes the payload
unchanged, so no JSON is ever decoded or re-encoded inside Redis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, cast

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


@dataclass(frozen=True)
class MoveResult:
    """What one pass of moving did, by the Redis server's clock."""

    moved: int
    next_due_ms: int | None
    now_ms: int
    missing: int = 0

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


class DelayedStore:
    """Schedule, move, cancel and inspect delayed messages in one Redis."""

    def __init__(self, client: redis.Redis, keys: KeySpace, move_batch_size: int = 500) -> None:
        self.client = client
        self.keys = keys
        self.move_batch_size = move_batch_size
        self.scripts = StoreScripts.register(client)

    def schedule(
        self,
        *,
        queue: str,
        message_id: str,
        task_id: str | None,
        due_ms: int,
        destination: str,
        payload: bytes,
    ) -> bool:
        """Store a message until ``due_ms``; True when it is now its queue's earliest."""
        record = Record(destination, task_id or "", payload)
        keys = self.keys.for_queue(queue)
        earliest = self.scripts.schedule(
            keys=[*keys.as_list(), self.keys.queues],
            args=[
                message_id,
                due_ms,
                record.encode(),
                task_id or "",
                queue,
                self.keys.wakeup_channel,
            ],
        )
        return bool(earliest)

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages."""
        moved, next_due, now, missing = self.scripts.move_due(
            keys=self.keys.for_queue(queue).as_list(), args=[self.move_batch_size]
        )
        return MoveResult(
            int(moved), None if next_due < 0 else int(next_due), int(now), int(missing)
        )

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another.
        """
        moved = missing = 0
        next_due: int | None = None
        now = 0
        active = self.queues()
        while active:
            full = []
            for queue in active:
                result = self.move_due(queue)
                moved += result.moved
                missing += result.missing
                now = max(now, result.now_ms)
                if result.moved + result.missing >= self.move_batch_size:
                    full.append(queue)
                elif result.next_due_ms is not None:
                    next_due = min(next_due or result.next_due_ms, result.next_due_ms)
            active = full
        if not now:
            now = self.server_time_ms()
        return MoveResult(moved, next_due, now, missing)

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
            backlog.append(QueueBacklog(queue, int(pending), int(overdue), next_due))
        return backlog

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000
