"""``schedule_many`` of a flow-controlled task: every call keeps its limit, under its own
limit key, whether it is a template (``apply_async``'s own message) or a copy, and is the
message a single send of it stores."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import kombu.pools
import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.common import diverter
from celery_delayq.brokers.connect import open_store
from celery_delayq.config.limits import LIMIT_KEY_HEADER
from celery_delayq.core.layout.gates import bucket_of, bucket_shard_key
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.core.layout.record import Record, task_key
from celery_delayq.core.store import DelayedStore
from celery_delayq.scheduling import templates
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.testing.releases import release_log

from ..flow.test_enter_at_publish import AHEAD_MS, scheduled_keys
from ..flow.test_unlimited_cost import monitored
from ..helpers import celery_process, noop_task, remember, runs

pytestmark = pytest.mark.integration

LIMITED = "tests.worker_app.limited"
#: One a minute: a bucket that has released once releases nothing more during a test.
SETTINGS: dict[str, Any] = {"delayq_rate_limits": {LIMITED: "1/m"}}
LATER = datetime(2031, 5, 17, 8, 30, tzinfo=timezone.utc)


def limited_task(app: Celery) -> Any:
    """The worker app's limited task, on ``app`` for publishing."""

    @app.task(name=LIMITED, shared=False)
    def limited(label: str = "") -> None:
        """Run by tests.worker_app."""

    return limited


def keyed(key: str, **options: Any) -> dict[str, Any]:
    """A call's options with its limit key."""
    return {"headers": {LIMIT_KEY_HEADER: key}, **options}


def default_shard(app: Celery) -> QueueKeys:
    with open_store(app) as store:
        return store.keys.for_queue("default")


def bucket_shard(store: DelayedStore, key: str, queue: str = "default") -> QueueKeys:
    """The queue shard that holds the key's bucket (the only one when not sharded)."""
    return store.keys.shard_of(queue, bucket_shard_key(bucket_of(LIMITED, key)))


def waiting(client: redis.Redis, app: Celery, key: str) -> list[bytes]:
    """The message keys waiting in the key's bucket, in order."""
    with open_store(app) as store:
        bucket = bucket_shard(store, key).gate("w", bucket_of(LIMITED, key))
    return list(client.lrange(bucket, 0, -1))


def envelope_as(client: redis.Redis, app: Celery, task_id: str, as_id: str) -> dict[str, Any]:
    """A stored message's envelope with its own ids (task id, delivery tag) replaced."""
    with open_store(app) as store:
        (message,) = store.find(task_id)
    envelope = json.loads(message.record.payload.decode().replace(task_id, as_id))
    envelope["properties"].pop("delivery_tag")
    return envelope


@pytest.mark.promise("bulk-keeps-limits")
def test_each_bulk_call_waits_under_its_own_limit_key(make_app, redis_client) -> None:
    """Calls of a task limited to one a minute, under three limit keys, without a countdown,
    with one, and with an ETA already past, in one ``schedule_many``: each one due is in
    its own key's bucket as the call returns, in call order; each one with a countdown in
    the schedule, its record's gate naming its key's bucket. A template without an ETA has
    copies with one, and the other way round."""
    app = make_app(**SETTINGS)
    task = limited_task(app)
    past = datetime.now(timezone.utc) - timedelta(seconds=5)
    calls = [
        *[((f"a{n}",), {}, keyed("a")) for n in range(4)],  # a's template: no ETA
        (("a-later",), {}, keyed("a", countdown=60)),
        (("b-later",), {}, keyed("b", countdown=60)),  # b's template: an ETA
        *[((f"b{n}",), {}, keyed("b")) for n in range(3)],
        (("b-past",), {}, keyed("b", eta=past)),
        *[((f"c{n}",), {}, keyed("c")) for n in range(2)],
    ]
    ids = celery_delayq.schedule_many(task, calls)
    by_label = {args[0]: task_id for (args, _, _), task_id in zip(calls, ids)}

    def keys_of(*labels: str) -> list[bytes]:
        return [task_key(by_label[label]) for label in labels]

    assert waiting(redis_client, app, "a") == keys_of("a0", "a1", "a2", "a3")
    assert waiting(redis_client, app, "b") == keys_of("b0", "b1", "b2", "b-past")
    assert waiting(redis_client, app, "c") == keys_of("c0", "c1")
    with open_store(app) as store:
        shard = store.keys.for_queue("default")
        later = keys_of("a-later", "b-later")
        assert sorted(scheduled_keys(redis_client, store, "default")) == sorted(later)
        for key, bucket in zip(later, ("a", "b")):
            gate = Record.decode(redis_client.hget(shard.messages, key), shard.own_list).gate
            assert gate is not None and gate.endswith(bucket_of(LIMITED, bucket).encode())
    assert redis_client.llen("default") == 0  # nothing published unlimited


def test_a_limited_copy_is_the_message_a_single_send_stores(make_app, redis_client) -> None:
    """A copy of a limited task's template, without a countdown and with one, is the
    message ``apply_async`` stores for the same call (ids aside): an ``eta`` of null, or
    the call's own."""
    app = make_app(**SETTINGS)
    task = limited_task(app)
    single = task.apply_async(("x",), headers={LIMIT_KEY_HEADER: "k"}, task_id="single").id
    ids = celery_delayq.schedule_many(
        task, [(("x",), {}, keyed("k")), (("x",), {}, keyed("k")), (("x",), {}, keyed("k"))]
    )
    expected = envelope_as(redis_client, app, single, "same")
    assert expected["headers"]["eta"] is None
    for task_id in ids:
        assert envelope_as(redis_client, app, task_id, "same") == expected

    single = task.apply_async(("x",), headers={LIMIT_KEY_HEADER: "k"}, eta=LATER).id
    (copy,) = celery_delayq.schedule_many(task, [(("x",), {}, keyed("k", eta=LATER))])[-1:]
    expected = envelope_as(redis_client, app, single, "same")
    assert expected["headers"]["eta"] == LATER.isoformat()
    assert envelope_as(redis_client, app, copy, "same") == expected


def test_an_unlimited_tasks_bulk_takes_the_same_redis_commands_with_limits_configured(
    app_factory,
) -> None:
    """``schedule_many`` of a task without limits, calls with an ETA (stored in
    chunks) and without (published at once), after the same done once (scripts loaded):
    the same Redis commands, by name and count, whether another task is limited or no
    limit is configured; one ``schedule_many.lua`` call a chunk."""
    counts = []
    for limits in ({}, SETTINGS):
        with RedisServer() as server:  # private: MONITOR counts every client
            kombu.pools.reset()  # a producer pool per URL: each app's channels its own
            app = app_factory(server.url, **limits)
            task = noop_task(app)
            # one ETA: the schedule's pages take the same writes however long it takes
            calls = [((n,), {}, {"eta": LATER} if n % 2 else {}) for n in range(500)]
            celery_delayq.schedule_many(task, calls)
            with monitored(server) as seen:
                celery_delayq.schedule_many(task, calls)
            counts.append(seen)
            app.close()
    plain, configured = counts
    assert plain[("client", "EVALSHA")] == 2  # 250 delayed calls: chunks of 200 and 50
    assert plain[("client", "LPUSH")] == 250  # the calls due now
    assert configured == plain


@pytest.mark.promise("bulk-enters-at-publish")
@pytest.mark.parametrize(
    ("shards", "cluster"), [(1, False), (4, False), (4, True)], ids=["one", "four", "cluster"]
)
def test_a_bulk_without_countdown_from_a_producer_whose_clock_runs_ahead_enters_at_publish(
    request, monkeypatch, shards, cluster
) -> None:
    """As a single send without a countdown (tests/flow/test_enter_at_publish.py): the
    producer's clock a minute ahead of Redis's, every call without one is in its key's
    bucket as ``schedule_many`` returns, due by the store's clock, while a call whose ETA
    is past by the producer's clock only waits in the schedule (never before its ETA by
    the store's). On a store of four shards the keys' buckets are in different shards,
    each call in its bucket's: one call, a group per shard, or on a Redis Cluster a call
    per shard."""
    ahead = SimpleNamespace(time=lambda: time.time() + AHEAD_MS / 1000)
    monkeypatch.setattr(diverter, "time", ahead)
    monkeypatch.setattr(templates, "time", ahead)
    make = request.getfixturevalue("make_cluster_app" if cluster else "make_app")
    app = make(delayq_store_shards=shards, **SETTINGS)
    queue = app.conf.task_default_queue
    limit_keys = ["a", "b", "c", "d"]
    calls = [((f"{k}{n}",), {}, keyed(k)) for n in range(3) for k in limit_keys]
    past = datetime.fromtimestamp(ahead.time() - 5, timezone.utc)  # ahead of the store's now
    calls.insert(5, (("a-past",), {}, keyed("a", eta=past)))
    ids = celery_delayq.schedule_many(limited_task(app), calls)
    by_label = {args[0]: task_key(task_id) for (args, _, _), task_id in zip(calls, ids)}

    with open_store(app) as store:
        client, now = store.client, store.server_time_ms()
        assert scheduled_keys(client, store, queue) == [by_label["a-past"]]
        shards_used = set()
        for k in limit_keys:
            shard = bucket_shard(store, k, queue)
            shards_used.add(shard.shard)
            in_bucket = client.lrange(shard.gate("w", bucket_of(LIMITED, k)), 0, -1)
            assert in_bucket == [by_label[f"{k}{n}"] for n in range(3)]
            records = [client.hget(shard.messages, key) for key in in_bucket]
            dues = [Record.decode(raw, shard.own_list).due_ms for raw in records]
            assert all(due <= now for due in dues), "due on the store's clock"
    assert len(shards_used) == min(shards, 3)  # these keys' buckets: 3 of the 4 shards


@pytest.mark.promise("bulk-keeps-limits")
@pytest.mark.system
@pytest.mark.timeout(120)
def test_a_worker_runs_a_bulk_of_two_keys_each_within_its_limit(
    make_app, redis_server, redis_client
) -> None:
    """Three calls under each of two keys, one a minute each, bulk-sent without a
    countdown, and one more each with a short countdown: a real worker runs each key's
    first call, and once a mover has passed after the short countdowns fell due (a task
    sent after them, due later, has run), each key has released once, its other calls
    waiting in its bucket."""
    app = make_app(**SETTINGS)
    task = limited_task(app)
    calls = [((f"{key}{n}",), {}, keyed(key)) for key in "ab" for n in range(3)]
    calls += [((f"{key}-soon",), {}, keyed(key, countdown=1)) for key in "ab"]
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"):
        celery_delayq.schedule_many(task, calls)
        remember(app, "after", countdown=3)
        wait_until(
            lambda: [r for r in runs(redis_client) if r["label"] == "after"],
            timeout=30,
            what="the task due after the bulk",
        )
        wait_until(lambda: len(runs(redis_client)) >= 3, timeout=10, what="each key's first")

    started = {run["label"]: run.get("key") for run in runs(redis_client)}
    assert started == {"a0": "a", "b0": "b", "after": None}
    releases = release_log(redis_client, default_shard(app))
    assert {bucket: len(times) for bucket, times in releases.items()} == {
        bucket_of(LIMITED, "a"): 1,
        bucket_of(LIMITED, "b"): 1,
    }
    for key in "ab":
        assert len(waiting(redis_client, app, key)) == 3  # two sent now, one a second later
