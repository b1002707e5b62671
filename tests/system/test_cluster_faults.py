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
from celery_delayq.testing import wait_until
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
