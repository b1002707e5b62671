"""A delayed store in a Redis of its own (``delayq_store_url``).

A broker that is not Redis (RabbitMQ, ...), or a Redis broker whose schedule should live
elsewhere, keeps its queues; delayed messages wait in this Redis and reach the broker
through the claim -> publish -> ack hand-over (core/handover.py), whose publisher opens
its broker connection on first use only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

from ..core.handover import ClaimPublishAck, HandOverPolicy, Publisher
from ..core.keys import KeySpace
from ..core.store import DelayedStore
from .settings import DelayqConfig

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def store_client(url: str) -> redis.Redis:
    """One client (and connection pool) per store URL and process: every channel and
    mover of the process shares it, as kombu's channels share one pool."""
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(url)
        return client


def separate_store(config: DelayqConfig, make_publisher: Callable[[], Publisher]) -> DelayedStore:
    """The store at ``config.store_url``; it publishes due messages to the broker with
    confirms, through a publisher made at the first delivery."""
    assert config.store_url is not None
    client = store_client(config.store_url)
    policy = HandOverPolicy(
        lease_ms=round(config.handover_lease * 1000),
        most_tries=config.handover_tries,
        retry_backoff_ms=round(config.handover_backoff * 1000),
    )
    handover = ClaimPublishAck(client, make_publisher, policy)
    return DelayedStore(client, KeySpace("", config.key_prefix), config.move_batch_size, handover)
