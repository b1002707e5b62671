"""Model-based test of the delayed store: random sequences of operations on a real Redis,
checked after every step against a plain-Python model of what is pending and what has
been delivered.

The store judges "due" by the Redis server's clock, which a test cannot fake: the clock
advances by short real sleeps, and every move reports the server time it used
(``MoveResult.now_ms``), from which the model computes which messages had to move, how
many (batches of ``BATCH``) and in what order.

Only public behaviour is used: ``DelayedStore`` methods, ``consistency_findings``, the
public ``celery_delayq.reschedule`` (what ``celery delayq promote`` calls before moving),
publishing through a Celery app, and kombu's queue lists.
"""

from __future__ import annotations

import math
import time
from bisect import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from celery.utils.time import maybe_iso8601
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from kombu.utils.json import dumps, loads

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.delay_keys import DelayKey
from celery_delayq.core.layout.record import key_index_field, message_key, task_key
from celery_delayq.core.results import MoveResult
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import PRIORITY_STEPS, kombu_lists

from .observe import as_scheduled, drain, due_ms_of, inconsistencies, payload_of

pytestmark = pytest.mark.integration

BATCH = 3  # small, so that moves of a few messages already take several batches
QUEUES = ("default", "reports", "odd {queue}: é")
TASK_IDS = (
    "0b6a3cd0-8f5e-4c49-9a4f-2f1d9a1e6b10",  # a canonical uuid
    "0B6A3CD0-8F5E-4C49-9A4F-2F1D9A1E6B10",  # the same uuid in capitals: another task id
    "fifteen-chars-x",  # 15 bytes
    "twelve-chars",  # 12 bytes
    "eleven-char",  # 11 bytes
    "retry me",
    "tâche-1",
)
NO_TASK_ID = ("", None)

PAST = st.integers(-10_000, -1)
NEAR = st.integers(0, 60)  # due within the next few steps
FAR = st.integers(3_600_000, 400 * 86_400_000)  # an hour to a year and more
OFFSETS = st.one_of(PAST, NEAR, FAR)
PICK = st.tuples(st.booleans(), st.integers(0, 1000))  # see StoreMachine._pick_task


@dataclass(frozen=True)
class Message:
    """The model of one pending message: where it goes, when, and its exact bytes."""

    queue: str
    task_id: str  # "" when it has none
    due_ms: int
    destination: str
    payload: bytes
    shard: int = 0  # of the queue's shards, the one the store keeps it in
    delay_key: str | None = None  # a keyed message's key, held while it is pending
    since: tuple[int, int] = (0, 0)  # server-time bounds of when its key was first taken


def listed(messages: Iterable[Any]) -> Counter[tuple[str, str, int, bytes]]:
    """Messages listed by the store (``pending``, ``find``), comparable with ``modelled``."""
    return Counter((m.queue, m.task_id, due_ms_of(m), payload_of(m)) for m in messages)


def modelled(messages: Iterable[Message]) -> Counter[tuple[str, str, int, bytes]]:
    return Counter((m.queue, m.task_id, m.due_ms, m.payload) for m in messages)


def reschedule_rewrite(due_ms: int) -> Callable[[bytes], bytes]:
    """A deterministic payload rewrite for ``DelayedStore.reschedule``; the model applies
    the same function to know the exact bytes that must be delivered."""

    def rewrite(payload: bytes) -> bytes:
        message = loads(payload)
        message["headers"]["eta"] = datetime.fromtimestamp(due_ms / 1000, timezone.utc).isoformat()
        message["headers"]["rescheduled"] = message["headers"].get("rescheduled", 0) + 1
        return dumps(message).encode()

    return rewrite


def without_eta(payload: bytes) -> str:
    """A message's JSON with its ``eta`` header left out, for comparing before/after a
    rewrite that changes only the ETA."""
    message = loads(payload)
    message["headers"].pop("eta", None)
    return dumps(message, sort_keys=True)


def destination_for(prefix: str, queue: str, priority: int | None) -> str:
    """The list kombu's Redis transport pushes a message of this priority to."""
    step = PRIORITY_STEPS[bisect(PRIORITY_STEPS, priority or 0) - 1]
    return kombu_lists(queue, prefix)[PRIORITY_STEPS.index(step)]


class StoreMachine(RuleBasedStateMachine):
    """One example: a flushed Redis, then random operations. Bound to an app and a store
    by ``machine_for``."""

    app: Celery
    store: DelayedStore
    client: redis.Redis
    prefix: str
    examples: int  # how many random sequences to run

    def __init__(self) -> None:
        super().__init__()
        self.client.flushall()
        self.pending: dict[int, Message] = {}  # by an identity the model gives each message
        self.delivered: set[int] = set()
        self.ever_queued: set[str] = set()
        self.lists = [name for q in QUEUES for name in kombu_lists(q, self.prefix)]
        self.next_ident = 0

    # -- helpers --------------------------------------------------------------------------

    def _new_ident(self) -> int:
        self.next_ident += 1
        return self.next_ident

    def _payload(self, ident: int, task_id: str, priority: int, raw: bool) -> bytes:
        if raw:  # not JSON, not UTF-8, looks like a length prefix: the mover must not care
            return b"12:\xff\xfe\x00raw %d {" % ident
        message = {
            "body": "W1tdLCB7fSwge31d",
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"id": task_id or None, "task": "model.task", "ident": ident},
            "properties": {"delivery_tag": f"tag-{ident}", "priority": priority},
        }
        return dumps(message).encode()

    def _schedule(self, queue: str, task_id: str | None, due_ms: int, step: int, raw: bool) -> bool:
        ident = self._new_ident()
        destination = destination_for(self.prefix, queue, step)
        payload = self._payload(ident, task_id or "", step, raw)
        earliest = self.store.schedule(
            Scheduled(
                queue=queue,
                message_id=f"tag-{ident}",
                task_id=task_id,
                due_ms=due_ms,
                destination=destination,
                payload=payload,
            )
        )
        shard = self._shard_of(queue, message_key(task_id, f"tag-{ident}"))
        self.pending[ident] = Message(queue, task_id or "", due_ms, destination, payload, shard)
        self.ever_queued.add(queue)
        return earliest

    def _shard_of(self, queue: str, key: bytes) -> int:
        """The shard the store puts a message in: the same hash of its key in every
        process (``KeySpace.shard_of``), so the model can use it."""
        return self.store.keys.shard_of(queue, key).shard

    def _collect(self) -> list[Message]:
        """Take everything delivered since the last look. Each delivery must be a pending
        message of the model (so: scheduled, and not delivered before), in its own list,
        byte for byte (or with its due time as the first key of the envelope); within a
        list, in due order (of each shard: shards are moved one after the other, so
        messages of two shards due in one pass may cross)."""
        by_payload = {m.payload: ident for ident, m in self.pending.items()}
        delivered = []
        for name, raws in drain(self.client, self.lists).items():
            dues: dict[int, list[int]] = {}
            for raw in raws:
                payload, carried_due = as_scheduled(raw)
                ident = by_payload.pop(payload, None)
                assert ident is not None, (
                    f"{name!r} got a message that is not pending (never scheduled, "
                    f"cancelled, or delivered before): {payload[:100]!r}"
                )
                message = self.pending.pop(ident)
                assert message.destination == name, f"delivered to {name!r}: {message}"
                assert carried_due in (None, message.due_ms), f"due-time key {carried_due}"
                assert ident not in self.delivered
                self.delivered.add(ident)
                delivered.append(message)
                dues.setdefault(message.shard, []).append(message.due_ms)
            for shard, shard_dues in dues.items():
                assert shard_dues == sorted(shard_dues), f"{name!r} {shard}: not in due order"
        return delivered

    def _pick_task(self, pick: tuple[bool, int], *extra: str | None) -> Any:
        """A task id: often one with messages pending (so the operation has work to do),
        else any of the usual ones (``extra`` too). ``pick`` is drawn the same way whatever
        the state (which depends on the real clock), so Hypothesis can replay it."""
        prefer_pending, index = pick
        pending = sorted({m.task_id for m in self.pending.values() if m.task_id})
        choices = pending if pending and prefer_pending else [*TASK_IDS, *extra]
        return choices[index % len(choices)]

    def _of_queue(self, queue: str) -> list[Message]:
        return [m for m in self.pending.values() if m.queue == queue]

    def _of_task(self, task_id: str) -> dict[int, Message]:
        return {i: m for i, m in self.pending.items() if task_id and m.task_id == task_id}

    def _now(self) -> int:
        return self.store.server_time_ms()

    def _check_move_all(self, before_ms: int, result: MoveResult) -> None:
        """After ``move_all_due`` that started at server time ``before_ms``: everything due
        by then moved, nothing moved before it was due, each queue moved a due-order prefix."""
        delivered = self._collect()
        assert result.moved == len(delivered)
        assert result.missing == 0
        assert result.now_ms >= before_ms
        ahead = self.store.handover.ahead_ms  # type: ignore[attr-defined]
        late_by = [m.due_ms for m in self.pending.values() if m.due_ms <= before_ms + ahead]
        assert not late_by, f"due at {late_by} <= {before_ms} + {ahead} ahead but not moved"
        assert all(m.due_ms <= result.now_ms for m in delivered), "moved before due"
        # a due-order prefix of each shard: shards are moved one after the other, each
        # by the Redis clock of its own call, so across shards a message due a moment
        # later may move while one due earlier waits for the next pass
        for queue in QUEUES:
            for shard in range(self.store.keys.shards):
                moved = [m.due_ms for m in delivered if (m.queue, m.shard) == (queue, shard)]
                left = [m.due_ms for m in self._of_queue(queue) if m.shard == shard]
                assert not moved or not left or max(moved) <= min(left), (queue, moved, left)
        remaining = [m.due_ms for m in self.pending.values()]
        assert result.next_due_ms == (min(remaining) if remaining else None)
        if delivered:
            assert max(0, *(before_ms - m.due_ms for m in delivered)) <= result.max_lateness_ms
            assert result.max_lateness_ms <= max(
                0, *(result.now_ms - ahead - m.due_ms for m in delivered)
            )
        else:
            assert result.max_lateness_ms == 0

    # -- rules ----------------------------------------------------------------------------

    @rule(
        queue=st.sampled_from(QUEUES),
        task_id=st.sampled_from(TASK_IDS + NO_TASK_ID),
        offset=OFFSETS,
        step=st.sampled_from(PRIORITY_STEPS),
        raw=st.booleans(),
    )
    def schedule(self, queue: str, task_id: str | None, offset: int, step: int, raw: bool) -> None:
        """Given a message with any due time, when scheduled, then it is pending, and the
        store says whether it is its queue's (shard's) earliest."""
        shard = self._shard_of(queue, message_key(task_id, f"tag-{self.next_ident + 1}"))
        others = [m.due_ms for m in self._of_queue(queue) if m.shard == shard]
        due = self._now() + offset
        earliest = self._schedule(queue, task_id, due, step, raw and not task_id)
        if not others or due < min(others):
            assert earliest
        elif due > min(others):
            assert not earliest

    @rule(
        queue=st.sampled_from(QUEUES),
        task_id=st.sampled_from(TASK_IDS + NO_TASK_ID),
        count=st.integers(4, 40) | st.integers(100, 150),
        offsets=st.lists(OFFSETS, min_size=1, max_size=4),
        spread=st.booleans(),
    )
    def schedule_many(
        self, queue: str, task_id: str | None, count: int, offsets: list[int], spread: bool
    ) -> None:
        """Many messages of one queue (and one task id: duplicates) around a few due
        times, all equal or a millisecond apart, so that ties, batch limits and however
        the store packs large schedules all meet."""
        now = self._now()
        for i in range(count):
            due = now + offsets[i % len(offsets)] + (i if spread else 0)
            self._schedule(queue, task_id, due, 0, False)

    @rule(
        queue=st.sampled_from(QUEUES),
        task_id=st.sampled_from(TASK_IDS),
        delay_key=st.sampled_from(("a", "user:42", "x" * 15)),
        on_held=st.sampled_from(("replace", "keep", "reject")),
        offset=OFFSETS,
        max_wait=st.sampled_from((0, 20, 3_600_000)),
    )
    def schedule_keyed(
        self,
        queue: str,
        task_id: str,
        delay_key: str,
        on_held: str,
        offset: int,
        max_wait: int,
    ) -> None:
        """Given a keyed message, when a pending message of its queue holds the key, then
        it replaces it (its due time capped at max_wait after the key was first taken),
        is dropped, or is refused; else it is stored and takes the key."""
        ident = self._new_ident()
        holders = [
            (i, m) for i, m in self.pending.items() if m.queue == queue and m.delay_key == delay_key
        ]
        assert len(holders) <= 1, holders
        payload = self._payload(ident, task_id, 0, False)
        destination = destination_for(self.prefix, queue, 0)
        before = self._now()
        outcome = self.store.schedule_keyed(
            Scheduled(queue, f"tag-{ident}", task_id, before + offset, destination, payload),
            DelayKey(delay_key, on_held, max_wait),
        )
        after = self._now()
        held = holders[0] if holders else None
        if held and on_held != "replace":
            assert outcome.task_id == held[1].task_id and outcome.due_ms == held[1].due_ms
            refused = {"keep": "kept", "reject": "rejected"}[on_held]
            assert outcome.outcome == ("scheduled" if held[1].task_id == task_id else refused)
            return
        assert outcome.outcome == ("replaced" if held else "scheduled")
        assert outcome.task_id == task_id
        since = (before, after)
        if held:
            assert outcome.replaced_id == held[1].task_id
            since = held[1].since
            del self.pending[held[0]]
        requested = before + offset
        if max_wait:
            assert outcome.due_ms <= min(requested, since[1] + max_wait)
            assert outcome.due_ms >= min(requested, since[0] + max_wait)
        else:
            assert outcome.due_ms == requested
        shard = self._shard_of(queue, key_index_field(delay_key.encode()))
        self.pending[ident] = Message(
            queue, task_id, outcome.due_ms, destination, payload, shard, delay_key, since
        )
        self.ever_queued.add(queue)

    @rule(ms=st.integers(1, 30))
    def clock_advances(self, ms: int) -> None:
        time.sleep(ms / 1000)

    @rule(queue=st.sampled_from(QUEUES), times=st.integers(1, 3))
    def move_due(self, queue: str, times: int) -> None:
        """When one batch is moved, then exactly the earliest due messages (by the server
        time of that move), at most BATCH of them, reach their lists."""
        for _ in range(times):  # a few batches, so that some tasks are moved only in part
            self._move_one_batch(queue)

    def _move_one_batch(self, queue: str) -> None:
        before = {i: m for i, m in self.pending.items() if m.queue == queue}
        result = self.store.move_due(queue)
        delivered = self._collect()
        assert result.missing == 0
        assert all(m.queue == queue for m in delivered)
        for shard in range(self.store.keys.shards):  # one batch from each shard
            due = sorted(
                m.due_ms for m in before.values() if m.shard == shard and m.due_ms <= result.now_ms
            )
            expected = min(BATCH, len(due))
            moved = sorted(m.due_ms for m in delivered if m.shard == shard)
            assert moved == due[:expected], shard
        assert result.moved == len(delivered)
        left = [m.due_ms for m in self._of_queue(queue)]
        assert result.next_due_ms == (min(left) if left else None)
        # now_ms is the time messages were judged due by: the Redis clock + move-ahead
        ahead = self.store.handover.ahead_ms  # type: ignore[attr-defined]
        lateness = [max(0, result.now_ms - ahead - m.due_ms) for m in delivered]
        if self.store.keys.shards == 1:
            assert result.max_lateness_ms == max(lateness, default=0)
        else:  # each shard's move read the clock itself, at or before result.now_ms
            assert result.max_lateness_ms <= max(lateness, default=0)

    @rule()
    def move_all_due(self) -> None:
        """When everything due is moved, then every queue is drained up to that time."""
        before = self._now()
        self._check_move_all(before, self.store.move_all_due())

    @rule(pick=PICK)
    def promote(self, pick: tuple[bool, int]) -> None:
        """``celery delayq promote TASK_ID``: the public reschedule to now (which rewrites
        the eta header), then a move of everything due."""
        task_id = self._pick_task(pick)
        task = self._of_task(task_id)
        start = time.time()
        changed = celery_delayq.reschedule(self.app, task_id, countdown=0)
        end = time.time()
        assert changed == len(task)
        found = self.store.find(task_id)
        assert len(found) == len(task)
        by_rest = {without_eta(m.payload): i for i, m in task.items()}
        for entry in found:
            payload = payload_of(entry)
            ident = by_rest.pop(without_eta(payload))  # only the eta header changed
            eta = maybe_iso8601(loads(payload)["headers"]["eta"]).timestamp()
            assert start - 0.001 <= eta <= end + 0.001
            assert due_ms_of(entry) == math.ceil(eta * 1000)
            self.pending[ident] = replace(task[ident], due_ms=due_ms_of(entry), payload=payload)
        before = self._now()
        self._check_move_all(before, self.store.move_all_due())

    @rule(pick=PICK)
    def cancel(self, pick: tuple[bool, int]) -> None:
        """When a task is cancelled, then all its pending messages, in every queue, go."""
        task_id = self._pick_task(pick, *NO_TASK_ID)
        task = self._of_task(task_id or "")
        assert self.store.cancel(task_id or "") == len(task)
        for ident in task:
            del self.pending[ident]

    @rule(pick=PICK, offset=OFFSETS)
    def reschedule(self, pick: tuple[bool, int], offset: int) -> None:
        """When a task is rescheduled, then all its pending messages get the new due time
        and the rewritten payload."""
        task_id = self._pick_task(pick)
        task = self._of_task(task_id)
        due = self._now() + offset
        rewrite = reschedule_rewrite(due)
        assert self.store.reschedule(task_id, due, rewrite) == len(task)
        for ident, message in task.items():
            self.pending[ident] = replace(message, due_ms=due, payload=rewrite(message.payload))

    @rule(queue=st.sampled_from(QUEUES))
    def purge(self, queue: str) -> None:
        assert self.store.purge(queue) == len(self._of_queue(queue))
        for ident in [i for i, m in self.pending.items() if m.queue == queue]:
            del self.pending[ident]

    @rule(
        queue=st.sampled_from(QUEUES),
        task_id=st.sampled_from((*TASK_IDS, None)),
        countdown=st.sampled_from([-1, 0, 0.005, 0.03, 3600]),
        priority=st.sampled_from([None, 0, 3, 5, 9]),
    )
    def publish(
        self, queue: str, task_id: str | None, countdown: float, priority: int | None
    ) -> None:
        """A task published through the transport is either queued at once (no future
        ETA) or pending with the due time of its eta header, in the list its priority
        chooses; never both, never neither."""
        result = self.app.send_task(
            "model.task",
            args=[self.next_ident],
            task_id=task_id,
            countdown=countdown,
            queue=queue,
            priority=priority,
        )
        destination = destination_for(self.prefix, queue, priority)
        known = {m.payload for m in self.pending.values()}
        stored = [m for m in self.store.find(result.id) if payload_of(m) not in known]
        queued = drain(self.client, self.lists)
        if stored:
            assert not queued
            (entry,) = stored
            payload = payload_of(entry)
            eta = maybe_iso8601(loads(payload)["headers"]["eta"]).timestamp()
            assert entry.queue == queue
            assert due_ms_of(entry) == math.ceil(eta * 1000)
            shard = self._shard_of(queue, task_key(result.id))
            message = Message(queue, result.id, due_ms_of(entry), destination, payload, shard)
            self.pending[self._new_ident()] = message
            self.ever_queued.add(queue)
        else:
            assert countdown < 1
            ((name, (payload,)),) = queued.items()
            assert name == destination
            assert loads(payload)["headers"]["id"] == result.id

    @rule(
        queue=st.none() | st.sampled_from(QUEUES),
        limit=st.integers(1, 8),
        newest_first=st.booleans(),
        after=st.none() | OFFSETS,
        before=st.none() | OFFSETS,
    )
    def list_pending(
        self,
        queue: str | None,
        limit: int,
        newest_first: bool,
        after: int | None,
        before: int | None,
    ) -> None:
        """``celery delayq list``: pending messages in due order within a window, at most
        ``limit`` (bounds half a millisecond off, so float rounding cannot matter)."""
        now = self._now()
        low = None if after is None else (now + after + 0.5) / 1000
        high = None if before is None else (now + before + 0.5) / 1000
        shown = self.store.pending(
            queue=queue, due_after=low, due_before=high, limit=limit, newest_first=newest_first
        )
        matching = [
            m
            for m in self.pending.values()
            if (queue is None or m.queue == queue)
            and (low is None or m.due_ms >= low * 1000)
            and (high is None or m.due_ms <= high * 1000)
        ]
        expected = sorted((m.due_ms for m in matching), reverse=newest_first)[:limit]
        assert [due_ms_of(m) for m in shown] == expected
        model = {(m.queue, m.due_ms, m.payload) for m in matching}
        seen = [(m.queue, due_ms_of(m), payload_of(m)) for m in shown]
        assert set(seen) <= model
        assert len(set(seen)) == len(seen)

    @rule(pick=PICK)
    def find(self, pick: tuple[bool, int]) -> None:
        """``celery delayq show``: every pending message of a task, in due order."""
        task_id = self._pick_task(pick)
        found = self.store.find(task_id)
        assert [due_ms_of(m) for m in found] == sorted(due_ms_of(m) for m in found)
        assert listed(found) == modelled(self._of_task(task_id).values())

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def nothing_is_delivered_outside_a_move(self) -> None:
        assert not drain(self.client, self.lists)

    @invariant()
    def the_store_lists_exactly_the_models_pending_messages(self) -> None:
        assert listed(self.store.pending(limit=10**6)) == modelled(self.pending.values())

    @invariant()
    def backlog_and_queues_agree_with_the_model(self) -> None:
        queues = set(self.store.queues())
        assert {m.queue for m in self.pending.values()} <= queues <= self.ever_queued
        backlog = {b.queue: b for b in self.store.backlog()}
        assert set(backlog) == queues
        for queue, entry in backlog.items():
            dues = sorted(m.due_ms for m in self._of_queue(queue))
            now = round(entry.server_time * 1000)
            assert entry.pending == len(dues), queue
            assert entry.overdue == sum(due <= now for due in dues), queue
            next_due = None if entry.next_due is None else round(entry.next_due * 1000)
            assert next_due == (dues[0] if dues else None), queue

    @invariant()
    def the_store_is_consistent(self) -> None:
        assert inconsistencies(self.store) == []


def machine_for(
    app: Celery, store: DelayedStore, client: redis.Redis, prefix: str, examples: int
) -> type[StoreMachine]:
    attributes: dict[str, Any] = {
        "app": app,
        "store": store,
        "client": client,
        "prefix": prefix,
        "examples": examples,
    }
    return type("BoundStoreMachine", (StoreMachine,), attributes)


@pytest.fixture(
    params=[("", 20, 1), ("tenant:", 8, 1), ("", 10, 3)],
    ids=["no prefix", "global_keyprefix", "3 shards"],
)
def bound_machine(
    request: pytest.FixtureRequest, make_app: Callable[..., Celery], redis_client: redis.Redis
) -> Iterator[type[StoreMachine]]:
    prefix, examples, shards = request.param
    options = {"global_keyprefix": prefix} if prefix else {}
    app = make_app(
        delayq_move_batch_size=BATCH,
        # moves look ahead by delayq_move_ahead only: the model does not know how much
        # further a dense instant is moved (tests/core/moving/test_mover.py does)
        delayq_burst_ahead=0,
        delayq_store_shards=shards,
        broker_transport_options=options,
    )
    with open_store(app) as store:
        yield machine_for(app, store, redis_client, prefix, examples)


@pytest.mark.slow  # 5 to 20 s, by what the random sequences hold
@pytest.mark.promise("moved-exactly-once", "store-follows-its-model")
def test_the_store_behaves_like_its_model_under_random_operations(
    bound_machine: type[StoreMachine],
) -> None:
    run_state_machine_as_test(
        bound_machine,
        settings=settings(
            max_examples=bound_machine.examples,
            stateful_step_count=40,
            deadline=None,
            database=None,
            phases=[Phase.generate, Phase.shrink],  # no "explain": replays cost too much here
        ),
    )
