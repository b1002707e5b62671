"""``broker_transport = "celery_delayq.transport:Transport"`` (or ``:SentinelTransport``,
``:AMQPTransport``, ``:AMQPSSLTransport``): the transports live in
``celery_delayq.celery``; this path stays for settings."""

from __future__ import annotations

from .celery.amqp_transport import AMQPChannel, AMQPSSLTransport, AMQPTransport
from .celery.transport import Channel, SentinelChannel, SentinelTransport, Transport

__all__ = [
    "AMQPChannel",
    "AMQPSSLTransport",
    "AMQPTransport",
    "Channel",
    "SentinelChannel",
    "SentinelTransport",
    "Transport",
]
