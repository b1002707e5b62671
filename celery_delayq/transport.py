"""``broker_transport = "celery_delayq.transport:Transport"`` (or ``:SentinelTransport``,
``:AMQPTransport``, ``:AMQPSSLTransport``, ``:SQSTransport``): the transports live in
``celery_delayq.celery``; this path stays for settings. The SQS one is imported only
when asked for (it loads boto3)."""

from __future__ import annotations

from typing import Any

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


def __getattr__(name: str) -> Any:
    if name in ("SQSChannel", "SQSTransport"):
        from .celery import sqs_transport

        return getattr(sqs_transport, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
