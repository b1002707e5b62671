"""Kombu Redis transports whose channels keep future-ETA messages in the delayed store.

Select one with Celery settings only::

    broker_url = "redis://localhost:6379/0"        # or rediss://
    broker_transport = "celery_delayq.transport:Transport"

or, behind Redis Sentinel, ``sentinel://...`` with
``broker_transport = "celery_delayq.transport:SentinelTransport"``. RabbitMQ: see
brokers/amqp.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

from ..common.diverter import store_retrying_errors
from ..common.limit_keys import watch_limit_keys
from .channel import Channel, SentinelChannel
from .polling import ConsumingPoller

__all__ = ["Channel", "SentinelChannel", "SentinelTransport", "Transport"]


class Transport(kombu_redis.Transport):
    """Redis transport with the delayed store (``driver_type`` stays ``redis``), consuming
    atomically and renewing the leases of what its worker holds (consume.py,
    restore.py)."""

    Channel = Channel
    recoverable_connection_errors = store_retrying_errors(kombu_redis.Transport)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        watch_limit_keys()
        # kombu annotates the base Transport's cycle as a FairCycle; its Redis transport
        # keeps its poller there, as here
        self.cycle = ConsumingPoller()  # type: ignore[assignment]


class SentinelTransport(kombu_redis.SentinelTransport):
    """Redis Sentinel transport with the delayed store, renewing leases as Transport."""

    Channel = SentinelChannel
    recoverable_connection_errors = store_retrying_errors(kombu_redis.SentinelTransport)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        watch_limit_keys()
        # kombu annotates the base Transport's cycle as a FairCycle; its Redis transport
        # keeps its poller there, as here
        self.cycle = ConsumingPoller()  # type: ignore[assignment]
