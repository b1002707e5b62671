"""The delayed store: every read and write of delayed messages in Redis goes through here.

Each queue keeps its messages as records (record.py) in one hash, and their due times in
small pages (lua/prelude.lua explains the layout, keys.py names the keys). Every change
is one atomic Lua script, so movers, producers and operators never need a lock. Due
messages leave through the store's ``HandOver`` (handover.py).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis
from redis.commands.core import Script

from .dead_letters import DeadLetters
from .handover import HandOver, SameRedisMove
from .keys import KeySpace, QueueKeys
from .movers import MoverRegistry
from .record import Record, duplicate_key, message_key, task_key
from .results import MoveResult, PendingMessage, QueueBacklog
from .scripts import StoreScripts
from .stats import counters

logger = logging.getLogger(__name__)

#: How long a worker's claim to list a queue in its reply to one remote-control request
#: lasts: longer than any client waits for replies, so a late replier cannot list the
#: queue a second time while the client still listens; short, since the claim is not
#: needed once the replies are in.
LISTING_CLAIM_MS = 60_000

#: Schedule calls per pipeline round trip in ``schedule_many``: large enough to hide the
#: round trip, small enough that one reply stays small.
SCHEDULE_CHUNK = 2_000


@dataclass(frozen=True)
class Scheduled:
    """One message to keep until it is due."""

    queue: str
    message_id: str  # its delivery tag: the key of a message without a task id
    task_id: str | None
    due_ms: int
    destination: str  # the kombu list it is pushed to (priority and prefix applied)
    payload: bytes
    expires_ms: int | None = None  # the queue's x-expires, when the publisher declared one


@dataclass(frozen=True)
class ScheduleCall:
    """The KEYS and ARGV of one ``schedule.lua`` call."""

    keys: list[str]
    args: list[Any]


class DelayedStore:
    """Schedule, move, cancel and inspect delayed messages in one Redis."""

    def __init__(
        self,
        client: redis.Redis,
        keys: KeySpace,
        move_batch_size: int = 500,
        handover: HandOver | None = None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.move_batch_size = move_batch_size
        self.scripts = StoreScripts.register(client)
        self.handover = handover or SameRedisMove(client, self.scripts)
        self.movers = MoverRegistry(client, keys.movers)
        self.dead = DeadLetters(self)

    # -- writing

    def schedule_call(self, message: Scheduled) -> ScheduleCall:
        """The KEYS and ARGV of ``schedule.lua`` for one message (rescue reuses them)."""
        keys = self.keys.for_queue(message.queue)
        record = Record(message.due_ms, message.destination, message.payload, message.expires_ms)
        key = message_key(message.task_id, message.message_id)
        tail = record.tail(keys.own_list)
        return ScheduleCall(
            keys=[*keys.as_list(), self.keys.queues],
            args=[
                *keys.page_args(),
                key,
                message.due_ms,
                tail,
                message.queue,
                self.keys.wakeup_channel,
            ],
        )

    def schedule(self, message: Scheduled) -> bool:
        """Store a message until it is due; True when it is now its queue's earliest."""
        call = self.schedule_call(message)
        return bool(self.scripts.schedule(keys=call.keys, args=call.args))

    def schedule_many(self, messages: Iterable[Scheduled]) -> int:
        """Store many messages in pipelined round trips (each still its own atomic
        call); how many were stored."""
        stored = 0
        pending: list[Scheduled] = []
        for message in messages:
            pending.append(message)
            if len(pending) == SCHEDULE_CHUNK:
                stored += self._schedule_pipelined(pending)
                pending = []
        return stored + self._schedule_pipelined(pending)

    def _schedule_pipelined(self, messages: list[Scheduled]) -> int:
        if not messages:
            return 0
        with self.client.pipeline(transaction=False) as pipe:
            for message in messages:
                call = self.schedule_call(message)
                self.scripts.schedule(keys=call.keys, args=call.args, client=pipe)
            pipe.execute()
        return len(messages)

    def close(self) -> None:
        """Release the hand-over's broker connection, if it has one of its own."""
        self.handover.close()

    # -- moving

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages."""
        return self.handover.deliver_due(self.keys.for_queue(queue), self.move_batch_size)

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another, and a
        queue whose move fails (its destination key is not a list, say) is logged and
        skipped: its messages stay pending, and the other queues are still moved.
        """
        total = _MoveTotals()
        active = self.queues()
        while active:
            results = {queue: self._try_move(queue) for queue in active}
            for result in results.values():
                if result is not None:
                    total.add(result)
            active = [queue for queue, result in results.items() if result and result.more_due]
        return total.result(lambda: self.server_time_ms())

    def _try_move(self, queue: str) -> MoveResult | None:
        try:
            return self.move_due(queue)
        except redis.ResponseError as exc:
            logger.warning("celery-delayq: cannot move queue %r: %s", queue, exc)
            return None

    # -- changing pending messages

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
        record = Record.decode(raw, keys.own_list)
        new = dataclasses.replace(record, due_ms=due_ms, payload=rewrite_payload(record.payload))
        new_raw = new.encode(keys.own_list)
        wakeup = self.keys.wakeup_channel
        return int(self._run(self.scripts.replace, keys, key, raw, new_raw, due_ms, wakeup))

    def purge(self, queue: str, lists: Sequence[str] = ()) -> int:
        """Delete every pending message of ``queue`` at once, and with ``lists`` (real
        keys) the messages in those lists too, in the same atomic call; how many there
        were."""
        keys = self.keys.for_queue(queue)
        return int(
            self.scripts.purge(
                keys=[*keys.as_list(), self.keys.queues, *lists],
                args=[*keys.page_args(), queue],
            )
        )

    def repair(self, queue: str, key: bytes, seen_page: bytes | None) -> bool:
        """Schedule a message at its record's due time, dropping its entry from
        ``seen_page`` (if any); False when it has no readable record (nothing left)."""
        keys = self.keys.for_queue(queue)
        return bool(self._run(self.scripts.repair, keys, key, seen_page or ""))

    # -- reading

    def backlog(self) -> list[QueueBacklog]:
        """Pending, overdue and next due time per queue (queues with nothing pending too)."""
        queues = self.queues()
        now_ms = self.server_time_ms()
        counts = self._counts(queues, ["-inf", now_ms + 1])
        pending = self.pending_counts(queues)
        handover = self.handover_counts(queues)
        now = now_ms / 1000.0
        return [
            QueueBacklog(
                queue, pending[queue], int(overdue), _seconds(next_due), now, *handover[queue]
            )
            for queue, (next_due, overdue) in zip(queues, counts)
        ]

    def handover_counts(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per queue: messages in flight to another broker, and dead letters."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                keys = self.keys.for_queue(queue)
                pipe.zcard(keys.inflight)
                pipe.hlen(keys.dead)
            replies = pipe.execute()
        return {
            queue: (int(replies[2 * i]), int(replies[2 * i + 1])) for i, queue in enumerate(queues)
        }

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
        order = "1" if newest_first else "0"
        found: list[PendingMessage] = []
        for name in [queue] if queue else self.queues():
            keys = self.keys.for_queue(name)
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

    def earliest(self, queues: Iterable[str], limit: int) -> list[PendingMessage]:
        """The ``limit`` earliest due pending messages of these queues, in due order."""
        found = [message for queue in queues for message in self.pending(queue=queue, limit=limit)]
        found.sort(key=lambda message: message.due)
        return found[:limit]

    def pending_counts(self, queues: Sequence[str]) -> dict[str, int]:
        """How many messages each of these queues has pending."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.hlen(self.keys.for_queue(queue).messages)
            return {queue: int(count) for queue, count in zip(queues, pipe.execute())}

    def claim_listing(
        self, queues: Sequence[str], ticket: str, holder: str, ttl_ms: int = LISTING_CLAIM_MS
    ) -> list[str]:
        """The queues whose delayed messages ``holder`` lists in its reply to the request
        ``ticket``: those nobody claimed first (one atomic ``SET NX`` each, so of all the
        workers answering one request exactly one gets each queue)."""
        if not queues:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.set(self.keys.inspect_claim(queue, ticket), holder, nx=True, px=ttl_ms)
            claimed = pipe.execute()
        return [queue for queue, won in zip(queues, claimed) if won]

    def _with_records(
        self, keys: QueueKeys, entries: Sequence[tuple[bytes, int | None]]
    ) -> list[PendingMessage]:
        """The messages of these keys that still have a record (due from the page entry
        when known, else from the record)."""
        if not entries:
            return []
        raws: list[Any] = self.client.hmget(keys.messages, [key for key, _ in entries])
        found = []
        for (key, due_ms), raw in zip(entries, raws):
            if raw is not None:
                record = Record.decode_or_raw(raw, keys.own_list, due_ms or 0)
                due = record.due_ms if due_ms is None else due_ms
                found.append(PendingMessage(keys.queue, key, due / 1000.0, record))
        return found

    def stats(self, queue: str) -> dict[str, int]:
        """The counters of one queue (see ``keys``): scheduled, moved, cancelled, lateness."""
        raw: dict[bytes, bytes] = self.client.hgetall(self.keys.for_queue(queue).stats)  # type: ignore[assignment]
        return counters(raw)

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        """Per queue, how many messages fall due in each window between ``edges``
        (epoch seconds, ascending): counts for [edges[0], edges[1]), ... ."""
        queues = self.queues()
        edges_ms = [_edge_ms(edge) for edge in edges]
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

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def _run(self, script: Script, keys: QueueKeys, *args: Any, client: Any = None) -> Any:
        """Run a per-queue script: KEYS are the queue's keys, ARGV the page arguments,
        then ``args``."""
        return script(keys=keys.as_list(), args=[*keys.page_args(), *args], client=client)


class _MoveTotals:
    """The sum of the moves of one ``move_all_due``."""

    def __init__(self) -> None:
        self.moved = self.missing = self.max_late = self.now = 0
        self.next_due: int | None = None

    def add(self, result: MoveResult) -> None:
        self.moved += result.moved
        self.missing += result.missing
        self.max_late = max(self.max_late, result.max_lateness_ms)
        self.now = max(self.now, result.now_ms)
        if result.next_due_ms is not None and not result.more_due:
            self.next_due = min(result.next_due_ms, self.next_due or result.next_due_ms)

    def result(self, server_time_ms: Callable[[], int]) -> MoveResult:
        now = self.now or server_time_ms()
        return MoveResult(self.moved, self.next_due, now, self.missing, self.max_late)


def _seconds(due_ms: int) -> float | None:
    return None if due_ms < 0 else due_ms / 1000.0


def _edge_ms(edge: float) -> Any:
    if math.isfinite(edge):
        return round(edge * 1000)
    return "+inf" if edge > 0 else "-inf"
