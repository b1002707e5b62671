"""Cancel on a Redis Cluster with a master down: a task's messages are in its task id's
shard of each queue, so a cancel asks only those shards. A task whose shards all live on
healthy masters is cancelled; one with a shard on the dead master fails loudly, as
nothing can be known about what that shard holds. (A real 3-master cluster that keeps
serving the slots it still covers, a real RabbitMQ.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

SHARDS = 8
TASKS = 60


def test_with_a_master_down_cancel_succeeds_for_tasks_on_healthy_masters_and_fails_loudly_on_the_dead_one(  # noqa: E501
    make_amqp_app: Callable[..., Celery],
) -> None:
    with RedisClusterServers(masters=3) as cluster:
        for master in cluster.masters():  # the live masters go on serving their own slots
            master.client().config_set("cluster-require-full-coverage", "no")
        nodes = ",".join(f"{host}:{port}" for host, port in cluster.startup_nodes)
        app = make_amqp_app(
            delayq_store_url=f"redis+cluster://{nodes}/0", delayq_store_shards=SHARDS
        )
        # fixed queue names and task ids, so where each task lives is the same every run:
        # with a random queue name, once in a while every task had a shard on the victim
        queues = ["cancel-a", "cancel-b"]
        sent = [
            app.send_task(
                "tests.remember", (i,), countdown=3600, queue=queues[i % 2], task_id=f"t-{i}"
            ).id
            for i in range(TASKS)
        ]
        with open_store(app) as store:
            registries = {slot_of(store.keys.queues), slot_of(store.keys.off_shard_queues)}
            # where a cancel looks: the task id's shard of each queue (it may be in either)
            looks_on = {
                task_id: {
                    cluster.node_for_slot(
                        slot_of(store.keys.shard_of(queue, task_key(task_id)).messages)
                    ).port
                    for queue in queues
                }
                for task_id in sent
            }
        victim = victim_for(cluster, registries, set.union(*looks_on.values()))
        on_victim = [task_id for task_id in sent if victim.port in looks_on[task_id]]
        assert 0 < len(on_victim) < TASKS

        victim.stop(kill=True)
        survivor = next(master for master in cluster.masters() if master is not victim)
        wait_until(
            lambda: b"fail" in survivor.client().execute_command("CLUSTER", "NODES"),
            timeout=30,
            what="the live masters mark the killed one failed",
        )

        with open_store(app) as store:
            for task_id in sent:
                if task_id in on_victim:
                    with pytest.raises(redis.RedisError):
                        store.cancel(task_id)
                else:
                    assert store.cancel(task_id) == 1, task_id
        healthy = next(task_id for task_id in sent if task_id not in on_victim)
        assert celery_delayq.cancel(app, healthy) == 0  # the API too: cancelled above


def victim_for(
    cluster: RedisClusterServers, registry_slots: set[int], homes: set[int]
) -> RedisServer:
    """A master that holds task shards but neither registry (a cancel reads the queue
    registry and the off-shard set first: without them it cannot know where to look)."""
    for master in cluster.masters():
        serves = any(cluster.node_for_slot(slot).port == master.port for slot in registry_slots)
        if master.port in homes and not serves:
            return master
    raise AssertionError(f"no master to kill apart from the registries': {cluster.describe()}")
