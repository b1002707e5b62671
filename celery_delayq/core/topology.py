"""Where a Redis client points: the servers behind it, its cluster layout, its URL.

The store, the replica waits (replicated.py) and the doctor's checks (health/health_checks.py)
all need these, and none of them should import another for it.
"""

from __future__ import annotations

from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.sentinel import SentinelConnectionPool

from .urls import MASK


def server_nodes(client: redis.Redis) -> list[tuple[str, redis.Redis]]:
    """The servers behind a client, each with a name for reports: the one Redis, or
    every master of a Redis Cluster (each checked on its own). The cluster's layout is
    read afresh first: the client's may still name a master that has failed over."""
    if isinstance(client, RedisCluster):
        reread_layout(client)
        masters = sorted(client.get_primaries(), key=lambda node: node.name)
        return [(node.name, client.get_redis_connection(node)) for node in masters]
    return [("", client)]


def reread_layout(client: redis.Redis) -> None:
    """Read a cluster's layout afresh (after a failover the client's may still name the
    dead master where a command would not correct it: a subscription, a node's own
    client, a check of every master); a single Redis has no layout to read."""
    if isinstance(client, RedisCluster):
        client.nodes_manager.initialize()


def redis_location(client: redis.Redis) -> str:
    """Where a client points, as a URL with its password masked as ``sanitize_url``
    masks it."""
    if isinstance(client, RedisCluster):
        masters = sorted(node.name for node in client.get_primaries())
        return f"redis+cluster://{','.join(masters)} ({len(masters)} masters)"
    pool = client.connection_pool
    kwargs: dict[str, Any] = pool.connection_kwargs
    auth = f"{kwargs.get('username') or ''}:{MASK}@" if kwargs.get("password") else ""
    if isinstance(pool, SentinelConnectionPool):  # the sentinels, not a default host
        sentinels = ",".join(
            _address(sentinel.connection_pool.connection_kwargs, 26379)
            for sentinel in pool.sentinel_manager.sentinels
        )
        return f"sentinel://{auth}{sentinels}/{kwargs.get('db', 0)} (master {pool.service_name})"
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    scheme = "rediss" if kwargs.get("ssl") or "SSL" in str(client.connection_pool) else "redis"
    return f"{scheme}://{auth}{_address(kwargs, 6379)}/{kwargs.get('db', 0)}"


def _address(kwargs: dict[str, Any], default_port: int) -> str:
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', default_port)}"
