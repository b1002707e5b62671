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
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis
from redis.client import PubSub
from redis.commands.core import Script

from .batching import BatchSizer
from .dead_letters import DeadLetters
from .delay_keys import DelayKey, KeyedOutcome
from .handover import HandOver, SameRedisMove
from .heartbeats import MoverRegistry
from .keys import KeySpace, QueueKeys
from .lua_scripts import (
    ScheduleCall,
    ScriptCall,
    ShardChunk,
    StoreScripts,
    run_pipelined,
    schedule_many_args,
)
from .queue_counters import counters
from .record import Record, duplicate_key, key_index_field, message_key, task_key
from .replicated import run_replicated
from .results import MoveResult, PendingMessage, Position, QueueBacklog
from .topology import reread_layout

logger = logging.getLogger(__name__)

#: How long a worker's claim to list a queue in its reply to one remote-control request
#: lasts: longer than any client waits for replies, so a late replier cannot list the
#: queue a second time while the client still listens; short, since the claim is not
#: needed once the replies are in.
LISTING_CLAIM_MS = 60_000

#: Schedule calls per pipeline round trip in ``schedule_many``: large enough to hide the
#: round trip, small enough that one reply stays small.
SCHEDULE_CHUNK = 2_000
#: Most pages one ``count.lua`` call reads (a few ms at most; see _shard_counts).
COUNT_PAGES = 500
#: Most entries one read of a page returns (page_entries).
PAGE_READ = 10_000

#: Seconds after which a cluster producer adds its queues to the registry again.
REGISTRY_REFRESH = 60.0


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
    #: Where the payload spells its ETA (byte offset, length): a keyed message whose
    #: due time ``max_wait`` brings forward gets that ETA rewritten in ISO 8601 UTC, so
    #: the worker runs it at the due time rather than holding it until the old ETA.
    eta_span: tuple[int, int] | None = None


@dataclass(frozen=True)
class ReplicaWait:
    """How schedules wait for replicas (``WAIT replicas timeout_ms`` after the write)."""

    replicas: int
    timeout_ms: int


class ChunkPartlyStored(redis.RedisError):
    """Some shards' parts of a chunk failed on a cluster (the rest are stored): the
    messages of those parts, which may not be stored."""

    def __init__(self, unstored: list[Scheduled]) -> None:
        super().__init__(f"{len(unstored)} messages of the chunk may not be stored")
        self.unstored = unstored


class DelayedStore:
    """Schedule, move, cancel and inspect delayed messages in one Redis or Redis Cluster.

    On a cluster (``cluster``), no script touches the queue registry, which lives in
    another slot: a queue is added to it before its first message is scheduled, and
    never removed (a stale entry costs a mover an empty visit, nothing more).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: KeySpace,
        move_batch_size: int = 500,
        handover: HandOver | None = None,
        cluster: bool = False,
        wait_for: ReplicaWait | None = None,
        move_call_budget: float = 0.0,
    ) -> None:
        self.client = client
        self.keys = keys
        self.move_batch_size = move_batch_size
        #: Sizes each move's batch (at most ``move_batch_size``) so that one call keeps
        #: Redis busy for at most ``move_call_budget`` seconds (0: always the full size).
        self.batch = BatchSizer(move_batch_size, move_call_budget)
        self.cluster = cluster
        #: Schedules wait for this many replicas (None: they do not wait).
        self.wait_for = wait_for
        self.scripts = StoreScripts.register(client)
        self.handover = handover or SameRedisMove(client, self.scripts)
        self.movers = MoverRegistry(client, keys.movers)
        self.dead = DeadLetters(self)
        self._registered: dict[str, float] = {}  # queue -> when this process last added it

    # -- writing

    def schedule_call(self, message: Scheduled, delay_key: DelayKey | None = None) -> ScheduleCall:
        """The KEYS and ARGV of ``schedule.lua`` for one message (rescue reuses them), or
        of ``schedule_keyed.lua`` for a keyed one: those go to their key's shard, so one
        script sees every message of a key."""
        key = message_key(message.task_id, message.message_id)
        encoded_key = delay_key.encoded if delay_key else None
        shard_by = key if encoded_key is None else key_index_field(encoded_key)
        keys = self.keys.shard_of(message.queue, shard_by)
        record = Record(
            message.due_ms, message.destination, message.payload, message.expires_ms, encoded_key
        )
        encoded = record.encode(keys.own_list)
        args = [
            *keys.page_args(),
            key,
            message.due_ms,
            encoded,
            message.queue,
            self.keys.wakeup_channel,
        ]
        if delay_key is not None:
            eta_at, eta_length = 0, 0  # 1-based in the record; 0: not to rewrite
            if message.eta_span is not None:
                eta_at = len(encoded) - len(message.payload) + message.eta_span[0] + 1
                eta_length = message.eta_span[1]
            args += [encoded_key, delay_key.on_held, delay_key.max_wait_ms, eta_at, eta_length]
        return ScheduleCall(keys=[*keys.as_list(), *self._registry_in_scripts()], args=args)

    def schedule(self, message: Scheduled) -> bool:
        """Store a message until it is due; True when it is now its queue's earliest."""
        return bool(self._run_schedule(self.scripts.schedule, message))

    def schedule_keyed(self, message: Scheduled, delay_key: DelayKey) -> KeyedOutcome:
        """Store a keyed message, or replace, keep or refuse against the pending message
        holding its key (keyed.py)."""
        reply = self._run_schedule(self.scripts.schedule_keyed, message, delay_key)
        return KeyedOutcome.from_reply(reply, message.task_id or "")

    def _run_schedule(
        self, script: Script, message: Scheduled, delay_key: DelayKey | None = None
    ) -> Any:
        self._register([message.queue])
        call = self.schedule_call(message, delay_key)
        if self.wait_for is not None:
            return self._run_schedules([(script, call.keys, call.args)])[0]
        return script(keys=call.keys, args=call.args)

    def _run_schedules(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run schedule calls pipelined, waiting for replicas when configured."""
        if self.wait_for is None:
            return run_pipelined(self.client, calls)
        return run_replicated(self.client, calls, self.wait_for.replicas, self.wait_for.timeout_ms)

    def _registry_in_scripts(self) -> list[str]:
        """KEYS[5] of schedule.lua and purge.lua: the queue registry, unless it is in
        another cluster slot than the queue's keys."""
        return [] if self.cluster else [self.keys.queues]

    def _register(self, queues: Iterable[str]) -> None:
        """On a cluster, add queues to the registry before their first message, and
        again every REGISTRY_REFRESH seconds while this process schedules into them (SADD
        is idempotent): a registry lost with its master comes back within that time."""
        if not self.cluster:
            return
        now = time.monotonic()
        due = {
            q
            for q in queues
            if now - self._registered.get(q, -REGISTRY_REFRESH) >= REGISTRY_REFRESH
        }
        if due:
            self.client.sadd(self.keys.queues, *sorted(due))
            self._registered.update(dict.fromkeys(due, now))

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
        self._register(message.queue for message in messages)
        calls = []
        for message in messages:
            call = self.schedule_call(message)
            calls.append((self.scripts.schedule, call.keys, call.args))
        self._run_schedules(calls)
        return len(messages)

    def schedule_chunk(self, messages: Sequence[Scheduled]) -> None:
        """Store a chunk of messages in one atomic call (``schedule_many.lua``): all of
        them or none. On a cluster a call cannot span slots, so each shard's part of the
        chunk is its own atomic call; ``ChunkPartlyStored`` says which parts were not."""
        if not messages:
            return
        self._register(message.queue for message in messages)
        parts = self._shard_chunks(messages)
        if not self.cluster:
            self._run_schedules([(self.scripts.schedule_many, *schedule_many_args(parts))])
            return
        failed: list[int] = []
        error: Exception | None = None
        for part in parts:
            keys, args = schedule_many_args([part])
            try:
                self._run_schedules([(self.scripts.schedule_many, keys, args)])
            except redis.RedisError as exc:
                failed.extend(part.indices)
                error = exc
        if error is not None:
            raise ChunkPartlyStored([messages[i] for i in sorted(failed)]) from error

    def _shard_chunks(self, messages: Sequence[Scheduled]) -> list[ShardChunk]:
        """The messages grouped by queue shard, each as ``schedule.lua`` would store it
        (``schedule_call``'s arguments, built without a call object per message: a
        chunk is hundreds)."""
        parts: dict[QueueKeys, ShardChunk] = {}
        registry = self._registry_in_scripts()
        for i, message in enumerate(messages):
            key = message_key(message.task_id, message.message_id)
            keys = self.keys.shard_of(message.queue, key)
            part = parts.get(keys)
            if part is None:
                part = parts[keys] = ShardChunk(
                    [*keys.as_list(), *registry],
                    keys.page_args(),
                    message.queue,
                    self.keys.wakeup_channel,
                )
            record = Record(
                message.due_ms, message.destination, message.payload, message.expires_ms
            )
            part.triples += (key, message.due_ms, record.encode(keys.own_list))
            part.indices.append(i)
        return list(parts.values())

    def close(self) -> None:
        """Release the hand-over's broker connection, if it has one of its own."""
        self.handover.close()

    # -- moving

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages from each shard."""
        results = [self._deliver(shard) for shard in self.keys.shards_of(queue)]
        if len(results) == 1:
            return results[0]
        next_due = [r.next_due_ms for r in results if r.next_due_ms is not None]
        return MoveResult(
            sum(r.moved for r in results),
            min(next_due) if next_due else None,
            max(r.now_ms for r in results),
            sum(r.missing for r in results),
            max(r.max_lateness_ms for r in results),
            sum(r.call_seconds for r in results),
            # the earliest shard's instant may be the dense one: wake for the largest lead
            max(r.next_lead_ms for r in results),
        )

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another, and a
        queue whose move fails (its destination key is not a list, say) is logged and
        skipped: its messages stay pending, and the other queues are still moved.
        """
        total = _MoveTotals()
        active = [shard for queue in self.queues() for shard in self._shards_in_turn(queue)]
        while active:
            results = [(shard, self._try_move(shard)) for shard in active]
            for _, result in results:
                if result is not None:
                    total.add(result)
            active = [shard for shard, result in results if result and result.more_due]
        return total.result(lambda: self.server_time_ms() + self.handover.ahead_ms)

    def _shards_in_turn(self, queue: str) -> list[QueueKeys]:
        """A queue's shards, starting at a random one: movers running side by side
        start on different shards instead of all claiming from the same one first."""
        shards = self.keys.shards_of(queue)
        start = random.randrange(len(shards))
        return shards[start:] + shards[:start]

    def _try_move(self, shard: QueueKeys) -> MoveResult | None:
        try:
            return self._deliver(shard)
        except redis.ResponseError as exc:
            logger.warning("celery-delayq: cannot move queue %r: %s", shard.label, exc)
            return None

    def _deliver(self, shard: QueueKeys) -> MoveResult:
        """One batch, sized by the time the calls before it took (batching.py)."""
        limit = self.batch.size
        result = self.handover.deliver_due(shard, limit)
        self.batch.observe(limit, result.moved + result.missing, result.call_seconds)
        return result

    # -- changing pending messages

    def cancel(self, task_id: str) -> int:
        """Remove every pending message of ``task_id``; how many were removed."""
        key = task_key(task_id)
        shards = self._all_shards(self.queues())
        calls = [
            (self.scripts.cancel, [*keys.as_list()], [*keys.page_args(), key]) for keys in shards
        ]
        return sum(int(removed) for removed in run_pipelined(self.client, calls))

    def reschedule(
        self, task_id: str, due_ms: int, rewrite_payload: Callable[[bytes], bytes]
    ) -> int:
        """Give every pending message of ``task_id`` a new due time; how many changed.

        ``rewrite_payload`` updates the message itself (its ``eta`` header), so a
        worker receiving it early does not hold it until the old ETA.
        """
        changed = 0
        for keys in self._all_shards(self.queues()):
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
        """Delete every pending message of ``queue``, and with ``lists`` (real keys of
        the same Redis) the messages in those lists too, in the same atomic call as an
        unsharded queue's messages (one call per shard: each shard is atomic on its
        own); how many there were. A sharded or clustered queue stays registered, since
        a producer may be scheduling into a shard purged a moment ago."""
        shards = self.keys.shards_of(queue)
        forget = self._registry_in_scripts() if len(shards) == 1 else []
        return sum(
            int(
                self.scripts.purge(
                    keys=[*keys.as_list(), *forget, *(lists if keys.shard == 0 else ())],
                    args=[*keys.page_args(), queue, len(forget)],
                )
            )
            for keys in shards
        )

    def repair(self, keys: QueueKeys, key: bytes, seen_page: bytes | None) -> bool:
        """Schedule a message at its record's due time, dropping its entry from
        ``seen_page`` (if any); False when it has no readable record (nothing left: an
        unreadable record goes to the dead letters)."""
        args = [*keys.page_args(), key, seen_page or ""]
        return bool(self.scripts.repair(keys=keys.move_keys(), args=args))

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
        shards = self._all_shards(queues)
        with self.client.pipeline(transaction=False) as pipe:
            for keys in shards:
                pipe.zcard(keys.inflight)
                pipe.hlen(keys.dead)
            replies = iter(pipe.execute())
        counts = {queue: (0, 0) for queue in queues}
        for keys in shards:
            in_flight, dead = counts[keys.queue]
            counts[keys.queue] = (in_flight + int(next(replies)), dead + int(next(replies)))
        return counts

    def _counts(self, queues: list[str], edges_ms: list[Any]) -> list[list[int]]:
        """Per queue: next due ms (-1 if none), then counts in [edges[i], edges[i + 1])."""
        totals: dict[str, list[int]] = {}
        for keys, counts in self._shard_counts(self._all_shards(queues), edges_ms):
            total = totals.setdefault(keys.queue, counts)
            if total is not counts:
                dues = [due for due in (total[0], counts[0]) if due >= 0]
                total[0] = min(dues) if dues else -1
                total[1:] = [a + b for a, b in zip(total[1:], counts[1:])]
        return [totals[queue] for queue in queues]

    def _shard_counts(
        self, shards: list[QueueKeys], edges_ms: list[Any]
    ) -> list[tuple[QueueKeys, list[int]]]:
        """``count.lua``'s reply per shard, each read in calls of at most COUNT_PAGES pages
        (pipelined over the shards), so that no call's work grows with the store."""
        counts: dict[int, list[int]] = {}
        cursors: dict[int, Any] = dict.fromkeys(range(len(shards)), "-inf")
        while cursors:
            calls: list[ScriptCall] = [
                (
                    self.scripts.count,
                    shards[i].as_list(),
                    [*shards[i].page_args(), cursor, COUNT_PAGES, *edges_ms],
                )
                for i, cursor in cursors.items()
            ]
            replies = run_pipelined(self.client, calls)
            for i, (next_due, last, *part) in zip(list(cursors), replies):
                total = counts.setdefault(i, [int(next_due), *(0 for _ in part)])
                total[1:] = [a + int(b) for a, b in zip(total[1:], part)]
                cursors[i] = b"(" + last
                if not last:
                    del cursors[i]
        return [(shards[i], counts[i]) for i in range(len(shards))]

    def _all_shards(self, queues: Iterable[str]) -> list[QueueKeys]:
        return [keys for queue in queues for keys in self.keys.shards_of(queue)]

    def pending(
        self,
        *,
        queue: str | None = None,
        due_after: float | None = None,
        due_before: float | None = None,
        limit: int = 100,
        newest_first: bool = False,
        after: Position | None = None,
    ) -> list[PendingMessage]:
        """Pending messages in due order (latest first with ``newest_first``), at most
        ``limit``, optionally of one queue and within a due-time window (epoch seconds).

        ``after`` (oldest first only) starts the listing just after that position of the
        total order (due ms, queue, message key) in place of ``due_after``: keyset paging,
        where each call reads at most ``limit`` messages however many share a due time.
        """
        low = "-inf" if due_after is None else repr(due_after * 1000)
        high = "+inf" if due_before is None else repr(due_before * 1000)
        order = "1" if newest_first else "0"
        found: list[PendingMessage] = []
        for keys in self._all_shards([queue] if queue else self.queues()):
            start, past = (low, b"") if after is None else after.start_in(keys.queue)
            flat = self._run(self.scripts.pending, keys, start, high, limit, order, past)
            entries = [(key, int(float(due))) for key, due in zip(flat[::2], flat[1::2])]
            found.extend(self._with_records(keys, entries))
        # a total order (due, queue, key), so that a page cut at ``limit`` is the same
        # cut on every call (paging resumes after it: ops/browse.py)
        found.sort(key=lambda m: (m.due_ms, m.queue, m.key), reverse=newest_first)
        return found[:limit]

    def find(self, task_id: str) -> list[PendingMessage]:
        """Every pending message of one Celery task id."""
        found: list[PendingMessage] = []
        for keys in self._all_shards(self.queues()):
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
        shards = self._all_shards(queues)
        with self.client.pipeline(transaction=False) as pipe:
            for keys in shards:
                pipe.hlen(keys.messages)
            counts = dict.fromkeys(queues, 0)
            for keys, count in zip(shards, pipe.execute()):
                counts[keys.queue] += int(count)
            return counts

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
        """The counters of one queue (see ``keys``), summed over its shards: scheduled,
        moved, cancelled, lateness."""
        total: dict[str, int] = {}
        for keys in self.keys.shards_of(queue):
            raw: dict[bytes, bytes] = self.client.hgetall(keys.stats)  # type: ignore[assignment]
            for name, value in counters(raw).items():
                total[name] = total.get(name, 0) + value
        return total

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        """Per queue, how many messages fall due in each window between ``edges``
        (epoch seconds, ascending): counts for [edges[0], edges[1]), ... ."""
        queues = self.queues()
        edges_ms = [_edge_ms(edge) for edge in edges]
        counts = self._counts(queues, edges_ms)
        return {queue: reply[1:] for queue, reply in zip(queues, counts)}

    def page_entries(self, keys: QueueKeys) -> dict[bytes, tuple[bytes, int]]:
        """Every page entry of a queue shard, message key -> (page number, due ms); for
        consistency checks."""
        entries: dict[bytes, tuple[bytes, int]] = {}
        pages: list[bytes] = self.client.zrange(keys.pages, 0, -1)  # type: ignore[assignment]
        with self.client.pipeline(transaction=False) as pipe:  # one round trip, not one a page
            for page in pages:
                pipe.zrange(keys.page(page), 0, PAGE_READ - 1, withscores=True)
            for page, page_entries in zip(pages, pipe.execute()):
                read = 0
                while True:  # a page of one instant may be huge: the rest in bounded reads
                    entries.update((key, (page, int(due))) for key, due in page_entries)
                    read += PAGE_READ
                    if len(page_entries) < PAGE_READ:
                        break
                    page_entries = self.client.zrange(
                        keys.page(page), read, read + PAGE_READ - 1, withscores=True
                    )
        return entries

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def wakeup_subscription(self) -> PubSub:
        """A subscription to the movers' wake-up channel. On a cluster it goes to a node
        the client's layout names; after a failover that may be the dead master, which
        a subscription (unlike a command) does not correct: the layout is read again."""
        try:
            return self._subscribe()
        except redis.ConnectionError:
            if not self.cluster:
                raise
            reread_layout(self.client)
            return self._subscribe()

    def _subscribe(self) -> PubSub:
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.keys.wakeup_channel)
        return pubsub

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
        self.next_lead = 0  # the extra lead of the instant that makes next_due

    def add(self, result: MoveResult) -> None:
        self.moved += result.moved
        self.missing += result.missing
        self.max_late = max(self.max_late, result.max_lateness_ms)
        self.now = max(self.now, result.now_ms)
        if result.next_due_ms is not None and not result.more_due:
            wake = result.next_due_ms - result.next_lead_ms
            if self.next_due is None or wake < self.next_due - self.next_lead:
                self.next_due, self.next_lead = result.next_due_ms, result.next_lead_ms

    def result(self, server_time_ms: Callable[[], int]) -> MoveResult:
        now = self.now or server_time_ms()
        return MoveResult(
            self.moved, self.next_due, now, self.missing, self.max_late, 0.0, self.next_lead
        )


def _seconds(due_ms: int) -> float | None:
    return None if due_ms < 0 else due_ms / 1000.0


def _edge_ms(edge: float) -> Any:
    if math.isfinite(edge):
        return round(edge * 1000)
    return "+inf" if edge > 0 else "-inf"
