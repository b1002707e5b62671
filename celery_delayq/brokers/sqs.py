"""kombu's SQS transport whose channels keep future-ETA messages in Redis.

Select it with Celery settings only::

    broker_url = "sqs://"                      # kombu's SQS URL, credentials as usual
    broker_transport = "celery_delayq.transport:SQSTransport"
    delayq_store_url = "redis://redis:6379/0"

SQS caps a message's delay at 15 minutes, and an ETA longer than the visibility timeout
(at most 12 h) is redelivered again and again; here a message whose ``eta`` lies ahead
waits in Redis instead and is sent to its SQS queue when due, by kombu's own put.
Needs kombu's ``sqs`` extra (``pip install "celery-delayq[sqs]"``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from kombu.transport import SQS

from ..core.handover import Publisher
from ..core.store import DelayedStore
from .common.diverter import Diverter, store_for, store_retrying_errors, virtual_outbound
from .common.settings import DelayqConfig
from .common.virtual_publisher import VirtualPublisher


class SQSChannel(SQS.Channel):
    """kombu's SQS channel with the delayed store (at ``delayq_store_url``)."""

    keeps_own_store = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.diverter = Diverter.of_current_app(
            self.store_for, broker=getattr(args[0], "client", None)
        )
        super().__init__(*args, **kwargs)

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        return lambda: VirtualPublisher(app.connection_for_write)

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        return store_for(config, self.publisher_factory(self.diverter.app))

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish, or store until due (sent to the same queue when due)."""
        if not self.diverter.divert(virtual_outbound(queue, message, destination=queue)):
            super()._put(queue, message, **kwargs)

    def _put_fanout(self, exchange: str, message: dict[str, Any], *args: Any, **kw: Any) -> None:
        """Broadcast; a ``revoke`` also cancels its ids in the store first."""
        self.diverter.cancel_if_revoke_in(exchange, message)
        super()._put_fanout(exchange, message, *args, **kw)

    def put_now(self, queue: str, message: dict[str, Any]) -> None:
        """kombu's own put, for a due message (never diverted to the store again)."""
        super()._put(queue, message)

    def _purge(self, queue: str) -> int:
        """Empty the queue and its delayed messages; how many there were (``celery
        purge`` and ``app.control.purge()`` count them)."""
        return int(super()._purge(queue)) + self.diverter.store.purge(queue)

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        """Delete the queue (kombu's own), then its delayed messages: they would
        otherwise be delivered to a queue that no longer exists."""
        super()._delete(queue, *args, **kwargs)
        self.diverter.store.purge(queue)


class SQSTransport(SQS.Transport):
    """SQS transport with the delayed store (``driver_type`` stays ``sqs``)."""

    Channel = SQSChannel
    recoverable_connection_errors = store_retrying_errors(SQS.Transport)
