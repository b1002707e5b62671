"""Which limited messages enter their buckets at publish, on a real Redis: one sent
without an ETA, even by a producer whose clock runs ahead of the store's
(schedule_gated.lua); a bulk chunk's due ones (schedule_many_gated.lua), kept in their
bucket's shard, so that one limit holds across the shards."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import redis

import celery_delayq
from celery_delayq.brokers.common import diverter
from celery_delayq.brokers.connect import open_store
from celery_delayq.config.limits import LIMIT_KEY_HEADER
from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.layout.record import Record
from celery_delayq.core.store import DelayedStore, Scheduled
from tests.flow.harness import gate_of

pytestmark = pytest.mark.integration

TASK = "flow.ahead"
#: How far ahead of the store's clock the producer's runs (ms): far beyond any move's
#: look-ahead, so only entering at publish puts the message in its bucket this soon.
AHEAD_MS = 60_000


def scheduled_keys(client: redis.Redis, store: DelayedStore, queue: str) -> list[bytes]:
    """Every message key in the schedule of the queue's shards."""
    return [
        key
        for shard in store.keys.shards_of(queue)
        for page in client.zrange(shard.pages, 0, -1)
        for key in client.zrange(shard.page(page), 0, -1)
    ]


@pytest.mark.promise("flow-enters-at-publish")
def test_a_message_without_eta_from_a_producer_whose_clock_runs_ahead_enters_at_publish(
    make_app, redis_client, monkeypatch
) -> None:
    """The producer's host clock a minute ahead of Redis's: its due time for a message
    sent without a countdown is a minute after the store's now, yet the message is in
    its bucket as the publish returns (due now, by the store's clock), and released
    within its limit: one a minute, so one in two move calls."""
    ahead = SimpleNamespace(time=lambda: time.time() + AHEAD_MS / 1000)
    monkeypatch.setattr(diverter, "time", ahead)
    app = make_app(delayq_rate_limits={TASK: "1/m"}, delayq_move_call_budget=0)
    for n in range(2):
        app.send_task(TASK, args=[n], headers={LIMIT_KEY_HEADER: "k"})
    with open_store(app) as store:
        shard = store.keys.for_queue("default")
        waiting = redis_client.lrange(shard.gate("w", bucket_of(TASK, "k")), 0, -1)
        assert len(waiting) == 2 and not scheduled_keys(redis_client, store, "default")
        now = store.server_time_ms()
        records = [redis_client.hget(shard.messages, key) for key in waiting]
        dues = [Record.decode(raw, shard.own_list).due_ms for raw in records]
        assert all(due <= now for due in dues), "due on the store's clock, not the producer's"

        store.move_due("default")
        store.move_due("default")

    delivered = [json.loads(raw)["body"] for raw in redis_client.lrange("default", 0, -1)]
    assert len(delivered) == 1  # the second waits a minute behind the first
    assert redis_client.llen(shard.gate("w", bucket_of(TASK, "k"))) == 1


def test_only_a_message_without_eta_is_taken_back_to_the_stores_now(redis_client) -> None:
    """Two limited messages a minute ahead of the store's clock: the one with an ETA
    waits in the schedule until then; the one without enters its bucket, due now, and
    the store's move releases it."""
    store = DelayedStore(redis_client, KeySpace(), 500)
    gate = gate_of(("1/m",), task=TASK)
    later = store.server_time_ms() + AHEAD_MS
    with_eta = Scheduled("q", "eta", "eta", later, "q", b'{"n": "eta"}', gate=gate)
    without = with_eta._replace(message_id="now", task_id="now", payload=b'{"n": "now"}')
    store.schedule(with_eta)
    store.schedule(without._replace(no_eta=True))
    keys = store.keys.for_queue("q")

    assert scheduled_keys(redis_client, store, "q") == [with_eta.key]
    assert redis_client.lrange(keys.gate("w", TASK), 0, -1) == [without.key]
    store.move_due("q")
    assert redis_client.lrange("q", 0, -1) == [b'{"n": "now"}']
    assert scheduled_keys(redis_client, store, "q") == [with_eta.key]


@pytest.mark.promise("flow-cluster-one-shard")
def test_a_chunks_limited_messages_wait_in_their_buckets_shard(redis_client) -> None:
    """A bulk chunk (schedule_chunk) of one bucket's messages, under different task ids,
    on a store of four shards: the due ones in its bucket, the later ones in the schedule,
    all of the bucket's shard, so its limit holds across the shards' movers (one a
    minute: one released however many shards move)."""
    store = DelayedStore(redis_client, KeySpace(shards=4), 500)
    gate = gate_of(("1/m",), task=TASK)
    now = store.server_time_ms()
    chunk = [
        Scheduled("q", f"m{n}", f"id{n}", now - 10 if n < 8 else now + AHEAD_MS, "q", b"%d" % n,
                  gate=gate)
        for n in range(12)
    ]  # fmt: skip
    store.schedule_chunk(chunk)
    shards = store.keys.shards_of("q")
    holding = [
        s for s in shards if redis_client.zcard(s.pages) or redis_client.exists(s.gate("w", TASK))
    ]
    assert len(holding) == 1
    assert redis_client.llen(holding[0].gate("w", TASK)) == 8
    assert len(scheduled_keys(redis_client, store, "q")) == 4

    store.move_due("q")  # every shard once
    store.move_due("q")
    assert redis_client.llen("q") == 1
    assert redis_client.llen(holding[0].gate("w", TASK)) == 7
    assert redis_client.sismember(store.keys.off_shard_queues, "q")


def test_a_chunks_due_limited_messages_enter_their_bucket_at_publish(redis_client) -> None:
    """A bulk chunk (schedule_chunk, one atomic call) of due limited messages, an
    unlimited one and a limited one due later: the due limited ones are in their bucket as
    the call returns, the others in the schedule; the store's move releases one a minute
    from the bucket, and the unlimited one."""
    store = DelayedStore(redis_client, KeySpace(), 500)
    gate = gate_of(("1/m",), task=TASK)
    now = store.server_time_ms()
    due = [Scheduled("q", f"m{n}", f"id{n}", now - 10, "q", b"%d" % n, gate=gate) for n in range(3)]
    later = Scheduled("q", "later", "later", now + AHEAD_MS, "q", b"later", gate=gate)
    free = Scheduled("q", "free", "free", now - 10, "q", b"free")
    store.schedule_chunk([*due, later, free])
    keys = store.keys.for_queue("q")

    assert redis_client.lrange(keys.gate("w", TASK), 0, -1) == [m.key for m in due]
    assert sorted(scheduled_keys(redis_client, store, "q")) == sorted([later.key, free.key])
    store.move_due("q")
    store.move_due("q")
    assert sorted(redis_client.lrange("q", 0, -1)) == [b"0", b"free"]
    assert scheduled_keys(redis_client, store, "q") == [later.key]


def test_a_limited_task_bulk_sent_without_countdown_is_in_its_bucket_as_schedule_many_returns(
    make_app, redis_client
) -> None:
    """``schedule_many`` of a limited task without a countdown: its chunk's messages are
    in their bucket when it returns, none in the schedule, and released one a minute."""
    app = make_app(delayq_rate_limits={TASK: "1/m"}, delayq_move_call_budget=0)

    @app.task(name=TASK, shared=False)
    def limited(n: int) -> None:
        """Limited to one a minute."""

    ids = celery_delayq.schedule_many(limited, [((n,), {}, {}) for n in range(20)])
    with open_store(app) as store:
        waiting = store.keys.for_queue("default").gate("w", TASK)
        assert redis_client.llen(waiting) == 20
        assert not scheduled_keys(redis_client, store, "default")
        store.move_due("default")
        store.move_due("default")
    delivered = [json.loads(raw)["headers"]["id"] for raw in redis_client.lrange("default", 0, -1)]
    assert delivered == ids[:1]


def test_every_message_of_a_limited_task_bulk_sent_with_countdown_keeps_its_limit(
    make_app, redis_client
) -> None:
    app = make_app(delayq_rate_limits={TASK: "1/m"})

    @app.task(name=TASK, shared=False)
    def limited(n: int) -> None:
        """Limited to one a minute."""

    celery_delayq.schedule_many(limited, [((n,), {}, {"countdown": 60}) for n in range(5)])
    with open_store(app) as store:
        shard = store.keys.for_queue("default")
        records = redis_client.hvals(shard.messages)
        gates = [Record.decode(raw, shard.own_list).gate for raw in records]
    assert len(gates) == 5 and None not in gates
