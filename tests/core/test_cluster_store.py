"""The delayed store on a Redis Cluster (``delayq_store_url = "redis+cluster://..."``):
a sharded queue spans the masters, every command gives the output it gives on a single
Redis, scripts come back after NOSCRIPT. (A real 3-master cluster from redis-server, a
real RabbitMQ; the CLI runs in-process.)"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import amqp
import kombu.pools
import pytest
from celery import Celery
from kombu import Queue

import celery_delayq
from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.core.layout.record import key_index_field, task_key
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

from ..helpers import invoke, noop_task, take_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SHARDS = 8


def test_a_sharded_queue_spans_every_master_and_cancel_removes_from_one_shard(
    make_cluster_app: Callable[..., Celery], redis_cluster: RedisClusterServers
) -> None:
    app = make_cluster_app(delayq_store_shards=SHARDS)
    queue = app.conf.task_default_queue
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(400)]

    with open_store(app) as store:
        shards = store.keys.shards_of(queue)
        held = Counter()
        for keys in shards:
            node = redis_cluster.node_for_slot(slot_of(keys.messages))
            held[node.port] += store.client.hlen(keys.messages)
        assert sum(held.values()) == 400
        assert len(held) == 3 and min(held.values()) > 0  # every master holds a part
        victim = sent[7].id
        home = store.keys.shard_of(queue, task_key(victim))
        before = {keys.shard: held_in(store, keys) for keys in shards}
        assert len(store.find(victim)) == 1
        assert store.cancel(victim) == 1
        after = {keys.shard: held_in(store, keys) for keys in shards}
        assert after == {**before, home.shard: before[home.shard] - 1}
        assert store.find(victim) == []
    assert celery_delayq.backlog(app)[0].pending == 399


def test_keyed_messages_live_in_their_keys_shard_and_are_found_by_task_id(
    make_cluster_app: Callable[..., Celery],
) -> None:
    """Every message of one delay key goes to one shard (the key's, so one script sees
    them all); cancel and show by task id still find it (they ask every shard)."""
    app = make_cluster_app(delayq_store_shards=SHARDS)
    task, queue = noop_task(app), app.conf.task_default_queue
    last = {}
    for n in range(3):
        for k in range(20):
            last[k] = celery_delayq.debounce(task, (k, n), key=f"user:{k}", countdown=3600)
    with open_store(app) as store:
        pending = store.pending(limit=100)
        assert sorted(m.task_id for m in pending) == sorted(r.id for r in last.values())
        for message in pending:
            assert message.record.delay_key is not None
            home = store.keys.shard_of(queue, key_index_field(message.record.delay_key))
            assert store.client.hexists(home.messages, message.key)
        assert len({m.record.delay_key for m in pending}) == 20
        for result in last.values():
            assert [m.task_id for m in store.find(result.id)] == [result.id]
            assert store.cancel(result.id) == 1
        assert store.pending(limit=100) == []
    again = celery_delayq.schedule_keyed(task, (0,), key="user:0", on_held="keep", countdown=60)
    assert again.outcome == "scheduled"  # cancel released the key


def held_in(store: DelayedStore, keys: QueueKeys) -> int:
    return int(store.client.hlen(keys.messages))


def scheduled_alike(app: Celery) -> list[str]:
    """The same tasks with the same fixed ETAs and ids on any app: outputs compare."""
    base = datetime(2100, 1, 1, tzinfo=timezone.utc)
    ids = []
    for i in range(40):
        eta = base + timedelta(seconds=i % 7, milliseconds=i)
        app.send_task("tests.remember", (i,), eta=eta, task_id=f"task-{i:02d}")
        ids.append(f"task-{i:02d}")
    return ids


def cli_json(app: Celery, *args: str) -> Any:
    result = invoke(app, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def without_clock(status: dict[str, Any]) -> dict[str, Any]:
    """``status --json`` less what depends on when and where it ran."""
    queues = [
        {k: v for k, v in q.items() if k not in ("next_due_in", "queue")} for q in status["queues"]
    ]
    return {"queues": queues}


def test_every_command_gives_the_same_output_on_a_cluster_as_on_a_single_redis(
    make_amqp_app: Callable[..., Celery], make_cluster_app: Callable[..., Celery]
) -> None:
    outputs: dict[str, list[Any]] = {}
    for make in (make_amqp_app, lambda: make_cluster_app(delayq_store_shards=SHARDS)):
        # one app at a time: kombu pools producers by broker URL, and both apps' is one
        kombu.pools.reset()
        app = make()
        ids = scheduled_alike(app)
        assert invoke(app, "cancel", ids[3]).exit_code == 0
        assert (
            invoke(app, "reschedule", ids[5], "--eta", "2100-01-02T00:00:00+00:00").exit_code == 0
        )
        for name, args in {
            "list": ("list", "--limit", "15"),
            "list newest": ("list", "--limit", "15", "--newest-first"),
            "show": ("show", ids[5]),
            "status": ("status",),
        }.items():
            found = cli_json(app, *args)
            if name == "status":
                found = without_clock(found)
            else:
                found = [{k: v for k, v in m.items() if k != "queue"} for m in found]
            outputs.setdefault(name, []).append(found)
        assert invoke(app, "promote", ids[0], ids[1]).exit_code == 0
        promoted = sorted(m.headers["id"] for m in take_all(app, app.conf.task_default_queue))
        outputs.setdefault("promoted", []).append(promoted)
        purged = cli_json(app, "purge", "--yes")
        outputs.setdefault("purged", []).append(list(purged.values()))
        # (a purged queue stays listed, with 0 pending, where it is sharded: see purge)
        left = sum(backlog.pending for backlog in celery_delayq.backlog(app))
        outputs.setdefault("after purge", []).append(left)

    for name, (on_single, on_cluster) in outputs.items():
        assert on_cluster == on_single, name
    assert outputs["promoted"][0] == ["task-00", "task-01"]
    assert outputs["purged"][0] == [37]


def test_scripts_come_back_after_every_node_forgot_them(
    make_cluster_app: Callable[..., Celery], redis_cluster: RedisClusterServers
) -> None:
    """A promoted replica or a new master has no scripts: NOSCRIPT, in a pipeline too,
    is answered by loading the script and running that call again (once)."""
    app = make_cluster_app(delayq_store_shards=SHARDS)
    queue = app.conf.task_default_queue
    with app.connection_for_write() as connection:
        Queue(queue)(connection.default_channel).declare()
    with open_store(app) as store:
        now = store.server_time_ms()
        due = [
            Scheduled(
                queue,
                f"m{i}",
                f"t{i}",
                now - 1,
                destination("", queue),
                envelope(amqp.Message(b"{}")),
            )
            for i in range(100)
        ]
        store.schedule(due[0])  # every script the store uses is now loaded somewhere
        client = redis_cluster.client()
        for node in client.get_primaries():
            client.get_redis_connection(node).script_flush()

        assert store.schedule_many(due[1:]) == 99  # pipelined: NOSCRIPT on every node
        assert [b.pending for b in store.backlog()] == [100]  # pipelined count scripts
    assert deliver_all_due(app) == 100
    assert len(take_all(app, queue)) == 100


def test_a_producer_adds_its_queue_to_a_lost_registry_again(
    make_cluster_app: Callable[..., Celery], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry (in a slot of its own, outside every script) is written by producers
    once a minute per queue: one lost with its master comes back while they schedule."""
    app = make_cluster_app()
    queue = app.conf.task_default_queue
    with open_store(app) as store:
        store.schedule(scheduled(queue, "first"))
        assert store.client.smembers(store.keys.queues) == {queue.encode()}
        store.client.delete(store.keys.queues)  # as a master lost without a replica
        store.schedule(scheduled(queue, "second"))
        assert not store.client.exists(store.keys.queues)  # within the minute: no SADD

        monkeypatch.setattr("celery_delayq.core.store.writes.REGISTRY_REFRESH", 0.0)
        store.schedule(scheduled(queue, "third"))
        assert store.client.smembers(store.keys.queues) == {queue.encode()}
        assert [b.pending for b in store.backlog()] == [3]


def scheduled(queue: str, task_id: str) -> Scheduled:
    """A message for ``queue``'s default-exchange route, due in an hour."""
    return Scheduled(
        queue,
        f"m-{task_id}",
        task_id,
        10**13,
        destination("", queue),
        envelope(amqp.Message(b"{}")),
    )


def test_schedule_many_stores_each_shard_part_of_a_chunk_on_its_master(
    make_cluster_app: Callable[..., Celery], redis_cluster: RedisClusterServers
) -> None:
    app = make_cluster_app(delayq_store_shards=SHARDS)

    @app.task(name="tests.bulk", shared=False)
    def bulk(n: int) -> None:
        return None

    ids = celery_delayq.schedule_many(bulk, [((i,), {}, {"countdown": 3600}) for i in range(500)])
    with open_store(app) as store:
        shards = store.keys.shards_of(app.conf.task_default_queue)
        held = {keys.shard: int(store.client.hlen(keys.messages)) for keys in shards}
        assert sum(held.values()) == 500 and min(held.values()) > 0  # every shard got some
        assert {m.task_id for m in store.pending(limit=1000)} == set(ids)
