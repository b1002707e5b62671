"""``broker_transport = "celery_delayq.transport:Transport"`` (or ``:SentinelTransport``,
``:AMQPTransport``, ``:AMQPSSLTransport``, ``:SQSTransport``): the settings path of the
transports, which live in ``celery_delayq.brokers``.

A worker imports this module when it first resolves its ``broker_transport``, just
before it sends ``worker_init``: the one moment a settings-only plugin can add its
bootsteps, so this module (and no broker module) connects the worker's hooks
(worker/hooks.py). The AMQP and SQS transports are imported only when asked for (they
load py-amqp and boto3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery import signals

from .brokers.redis import Channel, SentinelChannel, SentinelTransport, Transport
from .core.lazy import lazy_attributes

if TYPE_CHECKING:
    from .brokers.amqp import AMQPChannel, AMQPSSLTransport, AMQPTransport
    from .brokers.sqs import SQSChannel, SQSTransport

__all__ = [
    "AMQPChannel",
    "AMQPSSLTransport",
    "AMQPTransport",
    "Channel",
    "SQSChannel",
    "SQSTransport",
    "SentinelChannel",
    "SentinelTransport",
    "Transport",
]

#: The transports imported on first use, and their modules.
_LAZY = {
    "AMQPChannel": ".brokers.amqp",
    "AMQPSSLTransport": ".brokers.amqp",
    "AMQPTransport": ".brokers.amqp",
    "SQSChannel": ".brokers.sqs",
    "SQSTransport": ".brokers.sqs",
}


__getattr__ = lazy_attributes(__name__, _LAZY, __package__)


def _on_worker_init(sender: Any, **kwargs: Any) -> None:
    """worker/hooks.py's handler, imported in a starting worker only: a process that
    only publishes never loads the worker package."""
    from .worker.hooks import on_worker_init

    on_worker_init(sender, **kwargs)


# A worker that uses one of these transports gets the mover step and the delayed listing.
signals.worker_init.connect(_on_worker_init, weak=False, dispatch_uid="celery_delayq.mover")
