"""A delayed store in a Redis of its own (``delayq_store_url``).

A broker that is not Redis (RabbitMQ, ...), or a Redis broker whose schedule should live
elsewhere, keeps its queues; delayed messages wait in this Redis and reach the broker
through the claim -> publish -> ack hand-over (core/handover/claims.py), whose publisher opens
its broker connection on first use only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import cast
from urllib.parse import urlparse

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from ...config.settings import DelayqConfig
from ...core.handover.claims import ClaimPublishAck, HandOverPolicy
from ...core.handover.publishing import Publisher
from ...core.layout.keys import KeySpace
from ...core.store import DelayedStore

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def store_client(url: str, master_name: str | None = None) -> redis.Redis:
    """One client (and connection pool) per store URL and process: every channel and
    mover of the process shares it, as kombu's channels share one pool."""
    key = f"{url}#{master_name}"
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = _connect(url, master_name)
        return client


def _connect(url: str, master_name: str | None) -> redis.Redis:
    """A client for a redis://, rediss:// or unix:// URL, for the master behind
    ``sentinel://host:port[/db];sentinel://...`` (kombu's form of a Sentinel URL), or
    for the Redis Cluster of ``redis+cluster://[user:password@]host:port[,host:port]``."""
    if url.lower().startswith(("redis+cluster:", "rediss+cluster:")):
        return _cluster_client(url)
    if not url.lower().startswith("sentinel"):
        return redis.Redis.from_url(url)
    parts = [urlparse(one.strip()) for one in url.split(";") if one.strip()]
    password = next((p.password for p in parts if p.password), None)
    db = int((parts[0].path or "/0").lstrip("/") or 0)
    sentinel = Sentinel(
        [(p.hostname or "localhost", p.port or 26379) for p in parts], password=password
    )
    return sentinel.master_for(master_name or "", db=db, password=password)


def _cluster_client(url: str) -> redis.Redis:
    """A cluster client that knows every node the URL names (any one that answers
    tells it the rest), retrying through MOVED/ASK and failovers as redis-py does."""
    scheme, _, rest = url.partition("://")
    authority, slash, tail = rest.partition("/")
    credentials, at, hosts = authority.rpartition("@")
    first, *others = hosts.split(",")
    plain = f"{scheme[: -len('+cluster')]}://{credentials}{at}{first}{slash}{tail}"
    nodes = [ClusterNode(*_host_port(other)) for other in others]
    client = RedisCluster.from_url(plain, startup_nodes=nodes or None)
    return cast(redis.Redis, client)


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "localhost", int(port or 6379)


def separate_store(config: DelayqConfig, make_publisher: Callable[[], Publisher]) -> DelayedStore:
    """The store at ``config.store_url``; it publishes due messages to the broker with
    confirms, through a publisher made at the first delivery."""
    assert config.store_url is not None
    client = store_client(config.store_url, config.store_master_name)
    policy = HandOverPolicy(
        lease_ms=round(config.handover_lease * 1000),
        most_tries=config.handover_tries,
        retry_backoff_ms=round(config.handover_backoff * 1000),
    )
    handover = ClaimPublishAck(client, make_publisher, policy, release_log=config.release_log)
    keys = KeySpace("", config.key_prefix, config.store_shards)
    return DelayedStore(
        client,
        keys,
        config.move_batch_size,
        handover,
        cluster=config.store_is_cluster,
        wait_for=config.replica_wait,
        move_call_budget=config.move_call_budget,
    )
