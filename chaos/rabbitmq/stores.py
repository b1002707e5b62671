"""Where a RabbitMQ chaos run keeps its schedule, and what the monkey does to it: a
single Redis (AOF, fsync always) that it SIGKILLs and restarts, or a Redis Cluster (3
masters with a replica each, 8 shards per queue) whose masters it kills (a replica takes
over, the old master rejoins as a replica) and whose slots it moves under load."""

from __future__ import annotations

import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.testing import RedisServer
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

from .app import QUEUE


class SingleRedis:
    shards = 1

    def __init__(self) -> None:
        self.server = RedisServer("--appendfsync", "always", appendonly=True)

    def __enter__(self) -> SingleRedis:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)

    @property
    def url(self) -> str:
        return self.server.url

    def faults(self) -> dict[str, Callable[[], Any]]:
        return {"restart redis": lambda: self.server.restart(kill=True)}


class Cluster:
    shards = 8

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.servers = RedisClusterServers(masters=3, replicas_per_master=1)

    def __enter__(self) -> Cluster:
        self.servers.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.servers.stop()

    @property
    def url(self) -> str:
        return self.servers.url.replace("redis://", "redis+cluster://")

    def faults(self) -> dict[str, Callable[[], Any]]:
        return {"fail over a master": self.fail_over, "reshard a queue shard": self.reshard}

    def fail_over(self) -> None:
        """SIGKILL a master; once its replica has taken over, start it again (it rejoins
        as the new master's replica, so every master has a replica for the next kill)."""
        victim = self.rng.choice(self.servers.masters())
        self.servers.fail_over_master(victim)
        self.servers.restart_node(victim)

    def reshard(self) -> None:
        """Move the slot of one shard of the queue to another master, all its keys in
        one MIGRATE (see docs/guides/redis-cluster.md on resharding)."""
        shard = self.rng.choice(KeySpace(shards=self.shards).shards_of(QUEUE))
        slot = slot_of(shard.messages)
        source = self.servers.node_for_slot(slot)
        target = self.rng.choice([m for m in self.servers.masters() if m is not source])
        self.servers.migrate_slot(slot, target, batch=100_000)


def schedule_store(cluster: bool, rng: random.Random) -> AbstractContextManager[Any]:
    return Cluster(rng) if cluster else SingleRedis()
