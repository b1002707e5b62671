"""Faults of a Redis Cluster under a running mover: a master SIGKILLed while its
replica takes over. The mover retries, reconnects and finishes; nothing is lost, and a
message published twice (its claim or ack lost with the old master) carries one stable id."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import Queue

import celery_delayq
from celery_delayq.celery.connect import open_store
from celery_delayq.celery.message import STABLE_ID_HEADER
from celery_delayq.core.record import task_key
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.testing_cluster import RedisClusterServers, slot_of

from ..helpers import ready_in, schedule_overdue, standalone_mover, take_all

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

MESSAGES = 3_000
SHARDS = 8


@pytest.fixture
def replicated_cluster() -> Iterator[RedisClusterServers]:
    """3 masters with a replica each, of this test alone (one master gets killed)."""
    with RedisClusterServers(masters=3, replicas_per_master=1) as cluster:
        yield cluster


def replicated(cluster: RedisClusterServers) -> None:
    """Wait until every replica has everything its master has (replication is
    asynchronous: what a killed master had not sent is lost with it)."""
    for replica in cluster.replicas():
        master = cluster.master_of(replica)
        target = master.client().info("replication")["master_repl_offset"]
        wait_until(
            lambda replica=replica, target=target: (
                replica.client().info("replication")["slave_repl_offset"] >= target
            ),
            timeout=10,
            what=f"replica {replica.port} caught up",
        )


def pending_on(app: Celery, cluster: RedisClusterServers, port: int) -> int:
    """Pending messages in the shards that the master on ``port`` serves."""
    with open_store(app) as store:
        shards = store.keys.shards_of(app.conf.task_default_queue)
        return sum(
            int(store.client.hlen(keys.messages))
            for keys in shards
            if cluster.node_for_slot(slot_of(keys.messages)).port == port
        )


def test_a_master_failover_under_a_mover_loses_nothing(
    make_amqp_app, amqp_settings, rabbitmq_url, replicated_cluster
):
    store_url = replicated_cluster.url.replace("redis://", "redis+cluster://")
    settings: dict[str, Any] = {
        **amqp_settings,
        "delayq_store_url": store_url,
        "delayq_store_shards": SHARDS,
        "delayq_handover_lease": 4.0,  # claims lost in flight come back soon
        "delayq_move_batch_size": 100,
        "delayq_mover_retry_max": 1.0,
    }
    app = make_amqp_app(**settings)
    queue = app.conf.task_default_queue
    with app.connection_for_write() as connection:
        Queue(queue)(connection.default_channel).declare()
    schedule_overdue(app, queue, MESSAGES)
    replicated(replicated_cluster)
    victim = replicated_cluster.masters()[0]

    with standalone_mover(rabbitmq_url, settings) as mover:
        wait_until(lambda: ready_in(app, queue) >= MESSAGES // 10, timeout=60)
        assert pending_on(app, replicated_cluster, victim.port) > 0  # mid-stream there
        promoted = replicated_cluster.fail_over_master(victim)
        try:
            wait_until(
                lambda: not any(b.pending or b.in_flight for b in celery_delayq.backlog(app)),
                timeout=90,
                what="the mover has handed everything over after the failover",
                abort=mover.exited,
            )
        except TimeoutError:
            print(celery_delayq.backlog(app), mover.output[-5000:])  # shown with the failure
            raise

    assert promoted.port in {m.port for m in replicated_cluster.masters()}
    arrived = take_all(app, queue)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {f"t{i}" for i in range(MESSAGES)}  # nothing lost
    for task in (task for task, n in copies.items() if n > 1):
        stable = {m.headers[STABLE_ID_HEADER] for m in arrived if m.headers["id"] == task}
        assert len(stable) == 1  # published again after its claim or ack was lost
    assert not any(b.dead for b in celery_delayq.backlog(app))


def replica_holds(cluster: RedisClusterServers, keys: list[str]) -> int:
    """Messages the replicas hold in these hashes (each read where its slot's master's
    replica is)."""
    held = 0
    for key in keys:
        master = cluster.node_for_slot(slot_of(key))
        (replica,) = [r for r in cluster.replicas() if cluster.master_of(r) is master]
        with replica.client().pipeline(transaction=False) as pipe:  # one connection
            pipe.execute_command("READONLY")  # a replica answers reads only after this
            pipe.hlen(key)
            held += int(pipe.execute()[1])
    return held


def test_with_wait_replicas_a_scheduled_task_is_on_a_replica_when_the_publish_returns(
    make_amqp_app, replicated_cluster, caplog
):
    """``delayq_store_wait_replicas = 1``: each publish returns only once a replica has
    the message, so a failover right after it loses nothing. Asking for more replicas
    than a master has (after the failover): the write stands, the shortfall is logged."""
    store_url = replicated_cluster.url.replace("redis://", "redis+cluster://")
    app = make_amqp_app(
        delayq_store_url=store_url,
        delayq_store_shards=SHARDS,
        delayq_store_wait_replicas=1,
        delayq_store_wait_timeout=0.2,
    )
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(50)]
    with open_store(app) as store:
        hashes = [keys.messages for keys in store.keys.shards_of(app.conf.task_default_queue)]
        assert replica_holds(replicated_cluster, hashes) == 50  # read at once: no waiting

    promoted = replicated_cluster.fail_over_master(replicated_cluster.masters()[0])
    assert sum(b.pending for b in celery_delayq.backlog(app)) == 50
    with open_store(app) as store:
        assert {m.task_id for m in store.pending(limit=100)} == {r.id for r in sent}

    # The promoted master has no replica now: a write there waits out the timeout.
    queue, task_id = first_placed_on(app, replicated_cluster, promoted)
    with caplog.at_level("WARNING", logger="celery_delayq.core.replicated"):
        app.send_task("tests.remember", countdown=3600, queue=queue, task_id=task_id)
    assert "0 of 1 replicas" in caplog.text
    assert [b.pending for b in celery_delayq.backlog(app) if b.queue == queue] == [1]


def first_placed_on(
    app: Celery, cluster: RedisClusterServers, master: RedisServer
) -> tuple[str, str]:
    """A queue name and task id whose shard the given master serves."""
    with open_store(app) as store:
        for n in range(1000):
            queue, task_id = f"placed-{n // 10}", f"task-{n}"
            shard = store.keys.shard_of(queue, task_key(task_id))
            if cluster.node_for_slot(slot_of(shard.messages)) is master:
                return queue, task_id
    raise AssertionError("no shard on that master")
