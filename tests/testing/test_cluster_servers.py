"""The Redis Cluster harness of the tests (``celery_delayq.testing.redis_cluster``) against real
servers: a cluster starts and serves keys on every master; a master fails over to its
replica without losing a replicated key, and comes back as a replica; a slot moves to
another master while its keys stay readable through a cluster client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from celery_delayq.testing import RedisServer
from celery_delayq.testing.redis_cluster import SLOTS, RedisClusterServers

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    with RedisClusterServers(masters=3) as servers:
        yield servers


@pytest.fixture
def client(cluster: RedisClusterServers) -> Iterator[RedisCluster]:
    client = cluster.client()
    yield client
    client.close()


def key_on(cluster: RedisClusterServers, master: RedisServer) -> bytes:
    """A key (its own hash tag) that ``master`` serves."""
    for number in range(10_000):
        key = b"{tag%d}:key" % number
        if cluster.node_for_slot(cluster.slot_of(key)) is master:
            return key
    raise LookupError(f"no key found for {master.port}")


def fill_slot(client: RedisCluster, tag: str, count: int) -> list[bytes]:
    """``count`` keys sharing the hash tag ``tag`` (so one slot), each holding its name."""
    keys = [f"{{{tag}}}:{number}".encode() for number in range(count)]
    client.mset({key: key for key in keys})
    return keys


def keys_in_slot(server: RedisServer, slot: int) -> int:
    with server.client() as direct:
        return int(direct.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot))


def test_a_three_master_cluster_serves_keys_on_every_master(
    cluster: RedisClusterServers, client: RedisCluster
) -> None:
    masters = cluster.masters()
    assert len(masters) == 3 and cluster.replicas() == []
    assert sum(span.last - span.first + 1 for span in cluster.slot_ranges()) == SLOTS
    assert cluster.slot_of("{same}:a") == cluster.slot_of(b"{same}:b")

    keys = {master.port: key_on(cluster, master) for master in masters}
    for key in keys.values():
        assert client.set(key, key)

    for master in masters:
        key = keys[master.port]
        assert client.get(key) == key
        with master.client() as direct:
            assert direct.get(key) == key  # stored on the master that serves its slot


@pytest.mark.slow  # 4-5 s: a cluster start, then failure detection and a replica election
def test_a_master_fails_over_to_its_replica_keeping_a_replicated_key() -> None:
    with RedisClusterServers(masters=3, replicas_per_master=1) as cluster:
        assert len(cluster.masters()) == 3 and len(cluster.replicas()) == 3
        assert all(len(span.replicas) == 1 for span in cluster.slot_ranges())
        client = cluster.client()
        master = cluster.masters()[0]
        (replica,) = [r for r in cluster.replicas() if cluster.master_of(r) is master]
        key = key_on(cluster, master)
        with master.client() as direct:
            direct.set(key, b"kept")
            assert direct.wait(1, 1000) == 1  # WAIT 1 1000: the replica has it

        promoted = cluster.fail_over_master(master)

        assert promoted is replica and master.process is None
        assert promoted in cluster.masters()
        assert cluster.node_for_slot(cluster.slot_of(key)) is promoted
        assert client.get(key) == b"kept"  # the same client, redirected to the new master

        cluster.restart_node(master)

        assert master in cluster.replicas() and cluster.master_of(master) is promoted
        assert client.get(key) == b"kept"
        client.close()


def filled_slot_and_another_master(
    cluster: RedisClusterServers, client: RedisCluster, tag: str
) -> tuple[list[bytes], int, RedisServer, RedisServer]:
    """500 keys in one slot, the slot, its master and another master to move it to."""
    keys = fill_slot(client, tag, 500)
    slot = cluster.slot_of(keys[0])
    source = cluster.node_for_slot(slot)
    target = next(master for master in cluster.masters() if master is not source)
    return keys, slot, source, target


def test_migrate_slot_moves_a_slot_with_its_keys_to_another_master(
    cluster: RedisClusterServers, client: RedisCluster
) -> None:
    keys, slot, source, target = filled_slot_and_another_master(cluster, client, "moving")

    assert cluster.migrate_slot(slot, target) == 500

    assert cluster.node_for_slot(slot) is target
    assert keys_in_slot(target, slot) == 500 and keys_in_slot(source, slot) == 0
    assert [client.get(key) for key in keys] == keys


def test_keys_stay_readable_while_a_slot_is_half_migrated(
    cluster: RedisClusterServers, client: RedisCluster
) -> None:
    keys, slot, source, target = filled_slot_and_another_master(cluster, client, "halfway")
    migration = cluster.begin_slot_migration(slot, target)
    sample = keys[::37]  # spread over the batches: some moved, some not, at each step

    moved = 0
    while count := migration.move_keys(batch=100):
        moved += count
        assert keys_in_slot(source, slot) == 500 - moved
        assert keys_in_slot(target, slot) == moved
        assert [client.get(key) for key in sample] == sample  # source, or ASK to target
    assert moved == 500
    assert client.set(b"{halfway}:new", b"new")  # a new key: ASK sends it to the target
    assert keys_in_slot(target, slot) == 501

    migration.finish()

    assert cluster.node_for_slot(slot) is target
    assert [client.get(key) for key in keys] == keys
    assert client.get(b"{halfway}:new") == b"new"
