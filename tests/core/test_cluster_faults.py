"""Faults of a Redis Cluster under a running mover: a master SIGKILLed while its
replica takes over. The mover retries, reconnects and finishes; nothing is lost, and a
message published twice (its claim or ack lost with the old master) carries one stable id."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from kombu import Queue
from kombu.exceptions import OperationalError

import celery_delayq
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import open_store
from celery_delayq.config.errors import StoreUnavailable
from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

from ..helpers import ready_in, schedule_overdue, standalone_mover, take_all

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

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


def waiting_for_a_replica(
    make_amqp_app: Any, cluster: RedisClusterServers, wait_timeout: float
) -> Celery:
    """An app whose schedules on the cluster (8 shards) wait for one replica."""
    return make_amqp_app(
        delayq_store_url=cluster.url.replace("redis://", "redis+cluster://"),
        delayq_store_shards=SHARDS,
        delayq_store_wait_replicas=1,
        delayq_store_wait_timeout=wait_timeout,
    )


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
    app = waiting_for_a_replica(make_amqp_app, replicated_cluster, wait_timeout=0.2)
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


@pytest.mark.promise("store-outage-ridden-out")
def test_publishers_retry_through_a_master_failover_and_lose_nothing(
    make_amqp_app, replicated_cluster
):
    """Two publisher threads schedule while a master is SIGKILLed and its replica takes
    over: calls that meet the dead master raise StoreUnavailable inside Celery's publish
    retry, which tries again until the replica answers. With ``delayq_store_wait_replicas
    = 1`` every call that returned is in the store afterwards, and none failed."""
    app = waiting_for_a_replica(make_amqp_app, replicated_cluster, wait_timeout=0.5)
    policy = {"max_retries": 100, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.5}
    retried: list[str] = []
    sent: dict[int, list[str]] = {0: [], 1: []}
    sent_before: dict[int, int] = {}
    failed: list[BaseException] = []
    failed_over = threading.Event()

    def publish(publisher: int) -> None:
        ids = sent[publisher]
        # Until as many calls again have returned after the failover as before it.
        while publisher not in sent_before or len(ids) < 2 * sent_before[publisher]:
            if failed_over.is_set():
                sent_before.setdefault(publisher, len(ids))
            task_id = f"p{publisher}-{len(ids)}"
            try:
                app.send_task(
                    "tests.remember",
                    countdown=3600,
                    task_id=task_id,
                    retry=True,
                    retry_policy={**policy, "errback": lambda exc, _: retried.append(repr(exc))},
                )
            except Exception as exc:  # noqa: BLE001 - counted: the test requires none
                failed.append(exc)
                return
            ids.append(task_id)

    threads = [threading.Thread(target=publish, args=(p,)) for p in sent]
    for thread in threads:
        thread.start()
    wait_until(lambda: min(len(ids) for ids in sent.values()) >= 50, timeout=30)
    replicated_cluster.fail_over_master(replicated_cluster.masters()[0])
    failed_over.set()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    print(len(retried), "retries, e.g.", retried[:1], {p: len(ids) for p, ids in sent.items()})

    assert failed == []
    assert retried  # some calls met the dead master and went again
    with open_store(app) as store:
        pending = {m.task_id for m in store.pending(limit=100_000)}
    assert pending == set(sent[0]) | set(sent[1])  # every returned call is kept, once


def test_a_cluster_that_is_down_gives_publishers_store_unavailable_and_keeps_nothing(
    make_amqp_app,
):
    """A master without a replica dies: once the other nodes mark it failed, the cluster
    answers CLUSTERDOWN for every slot. A publish then raises StoreUnavailable (a
    connection error, so Celery's retry policy applies, and kombu finally raises its
    OperationalError as for a broker outage) and stores nothing; when the master is
    back, publishing goes on."""
    with RedisClusterServers(masters=3) as cluster:
        app = make_amqp_app(
            delayq_store_url=cluster.url.replace("redis://", "redis+cluster://"),
            delayq_store_shards=SHARDS,
        )
        victim, alive, _ = cluster.masters()
        queue = app.conf.task_default_queue
        before, during = (task_id_on(app, cluster, alive, queue, name) for name in ("b", "d"))
        app.send_task("tests.remember", countdown=3600, task_id=before)  # the queue's registered
        victim.stop(kill=True)
        survivor = alive.client()
        wait_until(
            lambda: survivor.cluster("info")["cluster_state"] == "fail",
            timeout=30,
            what="the other masters see the cluster down",
        )
        with pytest.raises(OperationalError, match="unreachable: The cluster is down") as raised:
            app.send_task("tests.remember", countdown=3600, task_id=during, retry=False)
        assert isinstance(raised.value.__cause__, StoreUnavailable)  # CLUSTERDOWN, mapped

        cluster.restart_node(victim)
        app.send_task("tests.remember", countdown=3600, task_id="after")
        with open_store(app) as store:  # each id read in its own shard
            held = {
                task_id: store.client.hexists(
                    store.keys.shard_of(queue, task_key(task_id)).messages, task_key(task_id)
                )
                for task_id in (before, during, "after")
            }
        assert held == {before: True, during: False, "after": True}


def task_id_on(
    app: Celery, cluster: RedisClusterServers, master: RedisServer, queue: str, prefix: str
) -> str:
    """A task id whose shard of ``queue`` the given master serves."""
    with open_store(app) as store:
        for n in range(1000):
            keys = store.keys.shard_of(queue, task_key(f"{prefix}{n}"))
            if cluster.node_for_slot(slot_of(keys.messages)) is master:
                return f"{prefix}{n}"
    raise AssertionError("no shard on that master")
