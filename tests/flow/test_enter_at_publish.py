"""Which limited messages enter their buckets at publish (schedule_gated.lua), on a real
Redis: one sent without an ETA, even by a producer whose clock runs ahead of the store's;
and where a bulk chunk keeps its limited messages (their bucket's shard, so that one
limit holds across the shards)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest
import redis

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
    within its limit: one a second, one per move call here."""
    ahead = SimpleNamespace(time=lambda: time.time() + AHEAD_MS / 1000)
    monkeypatch.setattr(diverter, "time", ahead)
    app = make_app(delayq_rate_limits={TASK: "1/s"}, delayq_move_call_budget=0)
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
    assert len(delivered) == 1  # the second waits a second behind the first
    assert redis_client.llen(shard.gate("w", bucket_of(TASK, "k"))) == 1


def test_only_a_message_without_eta_is_taken_back_to_the_stores_now(redis_client) -> None:
    """Two limited messages a minute ahead of the store's clock: the one with an ETA
    waits in the schedule until then; the one without enters its bucket, due now, and
    the store's move releases it."""
    store = DelayedStore(redis_client, KeySpace(), 500)
    gate = gate_of(("1/s",), task=TASK)
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
    on a store of four shards: all are kept in the bucket's shard, so its limit holds
    across the shards' movers (one a second: one released however many shards move)."""
    store = DelayedStore(redis_client, KeySpace(shards=4), 500)
    gate = gate_of(("1/s",), task=TASK)
    due = store.server_time_ms() - 10
    chunk = [Scheduled("q", f"m{n}", f"id{n}", due, "q", b"%d" % n, gate=gate) for n in range(8)]
    store.schedule_chunk(chunk)
    holding = [s for s in store.keys.shards_of("q") if redis_client.zcard(s.pages)]
    assert len(scheduled_keys(redis_client, store, "q")) == 8 and len(holding) == 1

    store.move_due("q")  # every shard once
    store.move_due("q")
    assert redis_client.llen("q") == 1
    assert redis_client.llen(holding[0].gate("w", TASK)) == 7
    assert redis_client.sismember(store.keys.off_shard_queues, "q")
