"""The bucket reader (store/flow.py) on a Redis Cluster store: each queue shard's bucket
index is read on the master that holds the shard's slot, so every bucket of a sharded
queue is found, on whichever master, and no other queue's, with no SCAN of a keyspace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

SHARDS = 6


def test_every_shard_is_read_on_its_own_master(
    make_cluster_app: Callable[..., Celery], redis_cluster: RedisClusterServers
) -> None:
    app = make_cluster_app(delayq_store_shards=SHARDS)
    with open_store(app) as store:
        masters = set()
        for queue in ("mail", "other"):
            for keys in store.keys.shards_of(queue):
                masters.add(redis_cluster.node_for_slot(slot_of(keys.gates)).port)
                later = store.server_time_ms() + 60_000
                for n in range(3):  # idle buckets: found by their index member alone
                    bucket = f"t\x00{queue}-{keys.shard}-{n}".encode()
                    state = keys.gate("s", "").encode() + bucket
                    store.client.hset(state, mapping={"spec": "c2/1000", "released": n})
                    store.client.zadd(keys.gate_index, {bucket: later})
                # members whose state expired (time past) or left nothing are no bucket
                store.client.zadd(keys.gate_index, {"t\x00past": 1, "t\x00gone": later})
                store.client.hset(keys.gate("s", "t\x00past"), "spec", "c2/1000")
                store.client.rpush(keys.gate("w", "t\x00waits"), "m1", "m2")
                store.client.zadd(keys.gate_ready, {"t\x00waits": 0})
        before = scans(store.client)
        found = store.buckets("mail")
        scanned = scans(store.client) - before
    assert len(masters) == 3  # the shards span every master
    assert sorted((b.shard, b.key) for b in found) == sorted(
        [(shard, f"mail-{shard}-{n}") for shard in range(SHARDS) for n in range(3)]
        + [(shard, "waits") for shard in range(SHARDS)]
    )
    assert sum(b.waiting for b in found) == 2 * SHARDS
    assert sum(b.released for b in found) == SHARDS * (0 + 1 + 2)
    assert {str(b.limits) for b in found if b.key != "waits"} == {"2 at once"}
    assert scanned == 0


def scans(client: Any) -> int:
    """SCAN calls the cluster's masters have served."""
    total = 0
    for node in client.get_primaries():
        stats = client.get_redis_connection(node).info("commandstats")
        total += stats.get("cmdstat_scan", {}).get("calls", 0)
    return total
