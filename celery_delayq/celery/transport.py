"""Kombu Redis transports whose channels keep future-ETA messages in the delayed store.

Select one with Celery settings only::

    broker_url = "redis://localhost:6379/0"        # or rediss://
    broker_transport = "celery_delayq.transport:Transport"

or, behind Redis Sentinel, ``sentinel://...`` with
``broker_transport = "celery_delayq.transport:SentinelTransport"``. RabbitMQ (py-amqp):
``celery_delayq.transport:AMQPTransport`` with ``delayq_store_url`` (amqp_transport.py).
"""

from __future__ import annotations

from typing import Any

from celery import signals
from kombu.transport import redis as kombu_redis

from .amqp_transport import AMQPChannel, AMQPSSLTransport, AMQPTransport
from .bootstep import add_worker_mover
from .channel import DelayedPublishMixin, check_store_setting
from .inspect import list_delayed_in_scheduled
from .settings import SENTINEL_SCHEMES


class Channel(DelayedPublishMixin, kombu_redis.Channel):
    """Redis channel with the delayed store."""


class Transport(kombu_redis.Transport):
    """Redis transport with the delayed store (``driver_type`` stays ``redis``)."""

    Channel = Channel


class SentinelChannel(DelayedPublishMixin, kombu_redis.SentinelChannel):
    """Redis Sentinel channel with the delayed store."""

    url_schemes = SENTINEL_SCHEMES


class SentinelTransport(kombu_redis.SentinelTransport):
    """Redis Sentinel transport with the delayed store."""

    Channel = SentinelChannel


__all__ = [
    "AMQPChannel",
    "AMQPSSLTransport",
    "AMQPTransport",
    "Channel",
    "SentinelChannel",
    "SentinelTransport",
    "Transport",
]


def _on_worker_init(sender: Any, **_: Any) -> None:
    check_store_setting(sender.app)
    add_worker_mover(sender)
    list_delayed_in_scheduled(sender.app)


# A worker loads this module when it first looks at its broker transport, just before
# it sends ``worker_init`` and builds its blueprint: the one moment a settings-only
# plugin can add a bootstep to the worker (and choose how its remote-control node
# answers ``inspect scheduled``).
signals.worker_init.connect(_on_worker_init, weak=False, dispatch_uid="celery_delayq.mover")
