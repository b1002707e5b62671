"""The py-amqp transport (RabbitMQ) whose channels keep future-ETA messages in Redis.

Select it with Celery settings only::

    broker_url = "amqp://guest:guest@rabbit:5672//"
    broker_transport = "celery_delayq.transport:AMQPTransport"
    delayq_store_url = "redis://redis:6379/0"

A message whose ``eta`` header lies ahead is written to the delayed store at
``delayq_store_url`` instead of the broker, once encoded as its hand-over will encode it
(what py-amqp cannot encode fails the publish now, as it fails a publish made at once);
everything else is published exactly as kombu's pyamqp transport publishes it. Movers
publish due messages to the exchange and routing key the producer chose, with confirms
(core/handover/claims.py).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

import amqp
from celery import Celery
from celery.app import base as celery_app_base
from kombu.transport import pyamqp

from ...config.errors import STORE_OUTAGES, ConfigurationError
from ...config.settings import DelayqConfig, config_of
from ...core.handover.publishing import Publisher
from ...core.store import DelayedStore
from ..common.diverter import STORE_URL_NEEDED, Diverter, Outbound, uses_delayq
from ..common.limit_keys import watch_limit_keys
from ..common.message import Delivered, count_of
from .envelope import destination, envelope
from .inbound import deep_frame_handler
from .publisher import CONFIRM_TIMEOUT_SECONDS, AMQPPublisher, check_publishable

logger = logging.getLogger(__name__)


class AMQPChannel(pyamqp.Channel):
    """py-amqp channel that keeps future-ETA messages in the delayed store."""

    keeps_own_store = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.diverter = Diverter.of_current_app(
            self.store_for, needs_store_url=True, broker=getattr(args[0], "client", None)
        )
        #: The queue each consumer tag of this channel consumes.
        self.consumed_queues: dict[str, str] = {}
        super().__init__(*args, **kwargs)
        # With the confirm_publish transport option, py-amqp makes basic_publish an
        # instance attribute that waits for each confirm; keep it for due messages.
        self._publish_now = self.__dict__.pop("basic_publish", None) or super().basic_publish

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        """Batched confirms, waited for at most half the lease: a live mover gives up
        on a batch (and gives its claims back) before another could take them."""
        wait = min(CONFIRM_TIMEOUT_SECONDS, config_of(app).handover_lease / 2)
        return lambda: AMQPPublisher(app.connection_for_write, confirm_timeout=wait)

    @classmethod
    def store_of_transport(
        cls, transport: Any, config: DelayqConfig
    ) -> tuple[DelayedStore, Callable[[], None]]:
        """RabbitMQ holds no store: it is at delayq_store_url."""
        raise ConfigurationError(STORE_URL_NEEDED)

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        """The store at ``delayq_store_url`` (the diverter checked it is set)."""
        from ..common.separate_store import separate_store

        return separate_store(config, self.publisher_factory(self.diverter.app))

    def basic_publish(
        self, msg: amqp.Message, exchange: str = "", routing_key: str = "", *args: Any, **kw: Any
    ) -> Any:
        """Publish, or store until due: grouped under the routing key (the queue name in
        Celery's own routing), the envelope to go to the producer's exchange and key."""
        properties = msg.properties
        if exchange == self.diverter.control_exchange:
            body = msg.body if isinstance(msg.body, bytes) else str(msg.body).encode()
            content = (properties.get("content_type"), properties.get("content_encoding"))
            self.diverter.cancel_if_revoke(exchange, body, *content)
        outbound = Outbound(
            queue=routing_key or exchange,
            headers=properties.get("application_headers") or {},
            destination=destination(exchange, routing_key),
            payload=lambda: envelope(msg),
            validate=self.check_publishable,
        )
        if self.diverter.divert(outbound):
            return None
        return self._publish_now(msg, exchange, routing_key, *args, **kw)

    def check_publishable(self, destination: str, payload: bytes) -> None:
        """Refuse now a message kept for later that its hand-over could not encode
        (publisher.check_publishable), with this connection's ``frame_max``."""
        check_publishable(destination, payload, self.connection.frame_max)

    # -- what the worker's poison guard asks of a delivered message (worker/poison.py) --

    def basic_consume(self, queue: str = "", consumer_tag: str = "", *args: Any, **kw: Any) -> Any:
        """py-amqp's, noting which queue each consumer tag consumes."""
        tag = super().basic_consume(queue, consumer_tag, *args, **kw)
        self.consumed_queues[tag or consumer_tag] = queue
        return tag

    def delivered(self, message: Any) -> Delivered:
        """The queue ``message`` was taken from (by its consumer tag), and its envelope,
        to go back to that queue through the default exchange."""
        info = message.delivery_info or {}
        tag = info.get("consumer_tag")
        queue = str(self.consumed_queues.get(str(tag)) or info.get("routing_key") or "")
        raw = amqp.Message(message.body, **message.properties)
        return Delivered(queue, destination("", queue), envelope(raw))

    def delivery_count(self, message: Any) -> int:
        """How many times RabbitMQ has delivered ``message``, this time included: as a
        quorum queue counts (``x-delivery-count``, earlier deliveries), else as the
        delayed store counts the deliveries RabbitMQ marks ``redelivered``; 0 (unknown)
        while the store cannot be reached."""
        headers = message.headers or {}
        if "x-delivery-count" in headers:
            return 1 + count_of(headers["x-delivery-count"])
        info = message.delivery_info or {}
        if not info.get("redelivered"):
            return 1
        queue = str(self.consumed_queues.get(str(info.get("consumer_tag"))) or "")
        body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
        identity = hashlib.sha256(f"{headers.get('id')!s:.200}".encode() + b"\0" + body)
        try:
            return 1 + self.diverter.store.count_redelivery(queue, identity.hexdigest()[:32])
        except STORE_OUTAGES as exc:
            logger.warning("celery-delayq: cannot count a redelivery (the store): %r", exc)
            return 0


class AMQPConnection(pyamqp.Connection):
    """py-amqp's connection, whose frames may hold header tables of any depth (inbound.py)."""

    Channel = AMQPChannel
    frame_handler_cls: Callable[..., Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.frame_handler_cls = deep_frame_handler(self.frame_handler_cls)


class AMQPTransport(pyamqp.Transport):
    """py-amqp transport with the delayed store (``driver_type`` stays ``amqp``).

    Its first construction keeps Celery's native delayed delivery away: ``send_task``
    builds its connection's transport before it asks ``detect_quorum_queues``."""

    Connection = AMQPConnection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        keep_native_delayed_delivery_away()
        super().__init__(*args, **kwargs)
        watch_limit_keys()


class AMQPSSLTransport(pyamqp.SSLTransport):
    """py-amqp transport over TLS with the delayed store (as ``AMQPTransport``)."""

    Connection = AMQPConnection

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        keep_native_delayed_delivery_away()
        super().__init__(*args, **kwargs)
        watch_limit_keys()


def keep_native_delayed_delivery_away() -> None:
    """Stop Celery (5.5+) from rerouting ETA messages of delayq apps through its native
    delayed delivery.

    With quorum queues and a topic or fanout exchange, ``Celery.send_task`` sends an ETA
    message to the ``celery_delayed_27`` exchange with a binary routing key, and no
    delayed store would ever see it. ``send_task`` asks
    ``celery.app.base.detect_quorum_queues`` first; for an app that uses celery-delayq
    it now hears "no quorum queues", so the message keeps its exchange and routing key
    and waits in the store (cancellable, listed, at millisecond resolution). The worker's
    own question (global QoS off for quorum queues) is asked through its own import and
    is not affected.
    """
    original = getattr(celery_app_base, "detect_quorum_queues", None)
    if original is None or getattr(original, "keeps_delayq_apps_away", False):
        return

    def detect_quorum_queues(app: Celery, driver_type: str) -> tuple[bool, str]:
        if uses_delayq(app):
            return False, ""
        return original(app, driver_type)

    # a mark on the function, so a second call does not wrap it again
    detect_quorum_queues.keeps_delayq_apps_away = True  # type: ignore[attr-defined]
    celery_app_base.detect_quorum_queues = detect_quorum_queues
