"""Writing new messages into the store: one, a keyed one, many pipelined, or a chunk
in one atomic call.

On a cluster no script touches the queue registry, which lives in another slot: a
queue is added to it before its first message is scheduled, and never removed (a stale
entry costs a mover an empty visit, nothing more).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import redis

from ..layout.gates import shard_key as gate_shard_key
from ..layout.keys import QueueKeys
from ..layout.record import Record, key_index_field, message_key
from ..lua import (
    ScheduleCall,
    ScriptCall,
    ShardChunk,
    run_pipelined,
    schedule_many_args,
)
from .state import StoreState

if TYPE_CHECKING:
    from ..layout.delay_keys import DelayKey, KeyedOutcome

#: Schedule calls per pipeline round trip in ``schedule_many``: large enough to hide the
#: round trip, small enough that one reply stays small.
SCHEDULE_CHUNK = 2_000

#: Seconds after which a cluster producer adds its queues to the registry again.
REGISTRY_REFRESH = 60.0


class Scheduled(NamedTuple):
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
    #: A flow-controlled message's gate (layout/gates.py): it waits in its bucket when due.
    gate: bytes | None = None
    #: Sent without an ETA (a limited task's): due as it is stored, by the store's clock.
    #: ``due_ms`` is the producer's clock's now, which may run ahead of the store's.
    no_eta: bool = False

    @property
    def key(self) -> bytes:
        """Its message key in the store (its task id packed, or its delivery tag)."""
        return message_key(self.task_id, self.message_id)

    def record(self, own_list: str, delay_key: bytes | None = None) -> bytes:
        """Its record as stored in a queue (shard) whose own kombu list is ``own_list``:
        the one encoding of a message that every write (a publish, a chunk, an occurrence
        written ahead) stores."""
        fields = Record(
            self.due_ms, self.destination, self.payload, self.expires_ms, delay_key, self.gate
        )
        return fields.encode(own_list)


class ChunkPartlyStored(redis.RedisError):
    """Some shards' parts of a chunk failed on a cluster (the rest are stored): the
    messages of those parts, which may not be stored."""

    def __init__(self, unstored: list[Scheduled]) -> None:
        super().__init__(f"{len(unstored)} messages of the chunk may not be stored")
        self.unstored = unstored


class Writes:
    """Schedules messages: each one atomic script call (``schedule*.lua``)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state
        self._registered: dict[str, float] = {}  # queue -> when this process last added it

    def schedule_call(self, message: Scheduled, delay_key: DelayKey | None = None) -> ScheduleCall:
        """The KEYS and ARGV of ``schedule.lua`` for one message (rescue reuses them), or
        of ``schedule_keyed.lua`` for a keyed one: those go to their key's shard, so one
        script sees every message of a key."""
        key = message.key
        encoded_key = delay_key.encoded if delay_key else None
        keys = self.state.keys.shard_of(message.queue, _shard_by(message, encoded_key))
        encoded = message.record(keys.own_list, encoded_key)
        args = [
            *keys.page_args(),
            key,
            message.due_ms,
            encoded,
            message.queue,
            self.state.keys.wakeup_channel,
        ]
        if delay_key is not None:
            eta_at, eta_length = 0, 0  # 1-based in the record; 0: not to rewrite
            if message.eta_span is not None:
                eta_at = len(encoded) - len(message.payload) + message.eta_span[0] + 1
                eta_length = message.eta_span[1]
            args += [encoded_key, delay_key.on_held, delay_key.max_wait_ms, eta_at, eta_length]
        return ScheduleCall(keys=[*keys.as_list(), *self.state.registry_in_scripts()], args=args)

    def schedule(self, message: Scheduled) -> bool:
        """Store a message until it is due; True when the movers were woken for it (it is
        now its queue's earliest, or a flow-controlled one made its bucket ready)."""
        if message.gate is not None:
            self.register_off_shard(message.queue)
        return bool(self._run_schedule(message.queue, self.publish_call(message)))

    def publish_call(self, message: Scheduled) -> ScriptCall:
        """The script call that publishes one unkeyed message: ``schedule.lua``, or for
        a flow-controlled one ``schedule_gated.lua``, which puts it straight into its
        bucket when it is already due, or sent without an ETA (its KEYS:
        ``schedule.lua``'s and the queue shard's ready buckets; its ARGV:
        ``schedule.lua``'s and whether it has no ETA)."""
        call = self.schedule_call(message)
        if message.gate is None:
            return (self.state.scripts.schedule, call.keys, call.args)
        ready = self.state.keys.shard_of(message.queue, gate_shard_key(message.gate)).gate_ready
        args = [*call.args, 1 if message.no_eta else 0]
        return (self.state.scripts.schedule_gated, [*call.keys, ready], args)

    def schedule_keyed(self, message: Scheduled, delay_key: DelayKey) -> KeyedOutcome:
        """Store a keyed message, or replace, keep or refuse against the pending message
        holding its key (layout/delay_keys.py)."""
        self.register_off_shard(message.queue)
        call = self.schedule_call(message, delay_key)
        keyed = (self.state.scripts.schedule_keyed, call.keys, call.args)
        reply = self._run_schedule(message.queue, keyed)
        from ..layout.delay_keys import KeyedOutcome  # keyed publishes only

        return KeyedOutcome.from_reply(reply, message.task_id or "")

    def _run_schedule(self, queue: str, call: ScriptCall) -> Any:
        """Run one publish's script call, its queue registered first."""
        self.register([queue])
        if self.state.wait_for is not None:
            return self._run_schedules([call])[0]
        # EVALSHA, and EVAL after NOSCRIPT: one round trip more on a Redis that has not
        # seen the script yet, where Script would take two (SCRIPT LOAD, EVALSHA again).
        return self.state.call(*call)

    def _run_schedules(self, calls: Sequence[ScriptCall]) -> list[Any]:
        """Run schedule calls pipelined, waiting for replicas when configured."""
        if self.state.wait_for is None:
            return run_pipelined(self.state.client, calls)
        from ..replicated import run_replicated  # with delayq_wait_for_replicas only

        return run_replicated(
            self.state.client, calls, self.state.wait_for.replicas, self.state.wait_for.timeout_ms
        )

    def register(self, queues: Iterable[str]) -> None:
        """On a cluster, add queues to the registry before their first message, and
        again every REGISTRY_REFRESH seconds while this process schedules into them (SADD
        is idempotent): a registry lost with its master comes back within that time."""
        if not self.state.cluster:
            return
        now = time.monotonic()
        due = {
            q
            for q in queues
            if now - self._registered.get(q, -REGISTRY_REFRESH) >= REGISTRY_REFRESH
        }
        if due:
            self.state.client.sadd(self.state.keys.queues, *sorted(due))
            self._registered.update(dict.fromkeys(due, now))

    def register_off_shard(self, queue: str) -> None:
        """Before a message of a sharded queue goes to another shard than its task id's
        (a keyed message, a periodic occurrence written ahead), list the queue in
        ``P:queues:off-shard``: cancel, reschedule and show by task id then ask every
        shard of it, not only the task's. Before every such message, not once a while as
        ``register``: a set lost (a flush, a master lost before its replica had it) would
        make a cancel miss the message, not merely delay it."""
        if self.state.keys.shards > 1:
            self.state.client.sadd(self.state.keys.off_shard_queues, queue)

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
        self.register(message.queue for message in messages)
        self._run_schedules([self.publish_call(message) for message in messages])
        return len(messages)

    def schedule_chunk(self, messages: Sequence[Scheduled]) -> None:
        """Store a chunk of messages in one atomic call (``schedule_many.lua``): all of
        them or none. On a cluster a call cannot span slots, so each shard's part of the
        chunk is its own atomic call; ``ChunkPartlyStored`` says which parts were not."""
        if not messages:
            return
        self.register(message.queue for message in messages)
        gated = {message.queue for message in messages if message.gate is not None}
        for queue in gated:
            self.register_off_shard(queue)  # in its bucket's shard, not its task id's
        parts = self._shard_chunks(messages, bool(gated))
        # with flow control, schedule_many_gated.lua: a due limited message enters its
        # bucket in the call, as with schedule_gated.lua; without, nothing more to pay
        scripts = self.state.scripts
        script = scripts.schedule_many_gated if gated else scripts.schedule_many
        if not self.state.cluster:
            self._run_schedules([(script, *schedule_many_args(parts))])
            return
        failed: list[int] = []
        error: Exception | None = None
        for part in parts:
            keys, args = schedule_many_args([part])
            try:
                self._run_schedules([(script, keys, args)])
            except redis.RedisError as exc:
                failed.extend(part.indices)
                error = exc
        if error is not None:
            raise ChunkPartlyStored([messages[i] for i in sorted(failed)]) from error

    def _shard_chunks(self, messages: Sequence[Scheduled], gated: bool) -> list[ShardChunk]:
        """The messages grouped by queue shard, each as ``schedule.lua`` would store it
        (``schedule_call``'s arguments and shard, built without a call object per
        message: a chunk is hundreds); ``gated``: each shard's keys end with its ready
        buckets, and its messages' ``no_eta`` flags follow them (``schedule_many_gated.lua``,
        as ``publish_call`` gives ``schedule_gated.lua`` the flag)."""
        parts: dict[QueueKeys, ShardChunk] = {}
        registry = self.state.registry_in_scripts()
        for i, message in enumerate(messages):
            key = message.key
            keys = self.state.keys.shard_of(message.queue, _shard_by(message))
            part = parts.get(keys)
            if part is None:
                part = parts[keys] = ShardChunk(
                    [*keys.as_list(), *registry, *([keys.gate_ready] if gated else [])],
                    keys.page_args(),
                    message.queue,
                    self.state.keys.wakeup_channel,
                    [],
                    [],
                    [] if gated else None,
                )
            part.triples.extend((key, message.due_ms, message.record(keys.own_list)))
            part.indices.append(i)
            if part.no_eta is not None:
                part.no_eta.append("1" if message.no_eta else "0")
        return list(parts.values())


def _shard_by(message: Scheduled, encoded_key: bytes | None = None) -> bytes:
    """What a message's queue shard is chosen by: a flow-controlled one's bucket (one
    bucket's messages wait in one shard, under one limit), a keyed one's delay key (one
    script sees every message of a key), else its message key."""
    if message.gate is not None:
        return gate_shard_key(message.gate)
    return message.key if encoded_key is None else key_index_field(encoded_key)
