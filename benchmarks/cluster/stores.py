"""The stores a cluster benchmark compares, each on servers of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from celery_delayq.brokers.common.separate_store import store_client
from celery_delayq.core.handover.claims import ClaimPublishAck
from celery_delayq.core.handover.publishing import Publisher
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, ReplicaWait
from celery_delayq.testing import RedisServer
from celery_delayq.testing.redis_cluster import RedisClusterServers


@dataclass(frozen=True)
class StoreSetup:
    """One configuration of the store: where it is, how each queue is sharded."""

    name: str
    masters: int  # 0: a single Redis, not a cluster
    shards: int = 1
    replicas: int = 0
    wait_replicas: int = 0

    @property
    def cluster(self) -> bool:
        return self.masters > 0


@dataclass(frozen=True)
class RunningStore:
    """A configuration with its servers up."""

    setup: StoreSetup
    url: str
    masters: list[redis.Redis]  # a plain client per master, for INFO

    def store(self, publisher: Publisher | None = None) -> DelayedStore:
        return store_on(self.setup, self.url, publisher)

    def used(self, section: str, field: str) -> list[float]:
        """One INFO field of every master."""
        return [float(master.info(section)[field]) for master in self.masters]


def store_on(setup: StoreSetup, url: str, publisher: Publisher | None = None) -> DelayedStore:
    """A store of this configuration at ``url`` (one client per URL and process), handing
    due messages to ``publisher`` when given."""
    client = store_client(url)
    wait = ReplicaWait(setup.wait_replicas, 1000) if setup.wait_replicas else None
    handover = ClaimPublishAck(client, lambda: publisher) if publisher is not None else None
    return DelayedStore(
        client, KeySpace(shards=setup.shards), 500, handover, cluster=setup.cluster, wait_for=wait
    )


@contextlib.contextmanager
def running(setup: StoreSetup) -> Iterator[RunningStore]:
    if not setup.cluster:
        with RedisServer() as server:
            yield RunningStore(setup, server.url, [server.client()])
        return
    with RedisClusterServers(setup.masters, setup.replicas) as cluster:
        url = cluster.url.replace("redis://", "redis+cluster://")
        yield RunningStore(setup, url, [server.client() for server in cluster.masters()])
