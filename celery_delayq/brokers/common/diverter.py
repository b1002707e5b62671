"""What every celery-delayq channel shares: its app's settings, its delayed store, and
the decision to keep a message whose ``eta`` lies ahead in that store.

``DelayqChannel`` is the base of all of them; ``VirtualChannelMixin`` adds the store to
kombu's virtual transports (the Redis channels in brokers/redis, SQS in
brokers/sqs.py), whose publishes all pass ``Channel._put``; the AMQP channel is in
brokers/amqp. Fanout (broadcast) messages are never delayed.

kombu gives a channel no reference to the Celery app that opened its connection, and
``current_app`` is Celery's empty fallback app in any thread that did not create the
app (a thread-pool web server, for one). So a channel takes its settings from the
thread's current app if it selects this transport, else from the one app in the
process that does (``delayq_app``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import cached_property
from typing import Any, TypeVar

from celery import Celery
from celery._state import _get_active_apps, get_current_app
from kombu.transport import get_transport_cls
from kombu.transport.base import Transport
from kombu.utils.json import dumps

from ...core.backoff import Backoff
from ...core.handover import Publisher
from ...core.store import DelayedStore, Scheduled
from .delay_keys import InvalidDelayKey, delay_key_of, report
from .errors import STORE_OUTAGES, ConfigurationError, StoreUnavailable
from .message import due_ms, eta_of, eta_span, eta_timestamp
from .revoke import kombu_message_body, pidbox_exchange, revoked_task_ids
from .separate_store import separate_store
from .settings import DelayqConfig, check_broker_url, config_of
from .virtual_publisher import VirtualPublisher

STORE_URL_NEEDED = (
    "celery-delayq on a broker that is not Redis needs delayq_store_url: the redis:// URL "
    'where delayed messages wait (e.g. delayq_store_url = "redis://localhost:6379/0")'
)

T = TypeVar("T")

#: Per store URL and process: how long publishers wait before trying a store that just
#: failed (channels come and go with kombu's retries; the outage outlives them).
_store_backoffs: dict[str, Backoff] = {}


def store_retrying_errors(transport: type[Transport]) -> tuple[type[BaseException], ...]:
    """``recoverable_connection_errors`` for a virtual transport: kombu's own fallback
    (every connection and channel error), declared. Undeclared, kombu re-raises an error
    that persists once it has reconnected to the broker: a store outage (the broker is
    fine) would get one retry whatever the publish's ``max_retries``."""
    return (*transport.connection_errors, *transport.channel_errors)


class DelayqChannel:
    """What every celery-delayq channel has: its app's settings and a delayed store.

    The virtual-transport channels (``VirtualChannelMixin``: Redis in brokers/redis,
    SQS) and the AMQP channel (brokers/amqp) derive from it; ``uses_delayq`` looks
    for it.
    """

    delayq_config: DelayqConfig
    _delayq_app: Celery
    _delayed_store: DelayedStore | None = None
    #: While set (scheduling/bulk.py), delayed messages are collected here instead
    #: of written one by one.
    captured: list[Scheduled] | None = None
    #: Whether the broker itself can hold the store (a Redis broker); otherwise
    #: delayq_store_url is needed.
    keeps_own_store = False

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        """A delayed store with the given settings, for this channel's broker: at
        ``delayq_store_url`` when set (handing messages over with confirms), else in
        the broker itself."""
        if config.store_url is not None:
            return separate_store(config, self.publisher_factory(self._delayq_app))
        return self.store_on_broker(config)

    def store_on_broker(self, config: DelayqConfig) -> DelayedStore:
        """The store in the broker's own Redis (only a Redis broker has one)."""
        raise ConfigurationError(STORE_URL_NEEDED)

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        """How a mover of ``app`` opens its publisher to this kind of broker."""
        raise NotImplementedError

    @property
    def delayed_store(self) -> DelayedStore:
        """The store this channel publishes delayed messages to (its app's settings)."""
        if self._delayed_store is None:
            self._delayed_store = self.store_for(self.delayq_config)
        return self._delayed_store

    def store_if_future(self, queue: str, message: dict[str, Any], payload: Any) -> bool:
        """Keep ``message`` in the store when its ``eta`` lies ahead, or when it has a
        delay key (delay_keys.py; then even when already due); whether it was kept.

        ``payload`` is the envelope to store, or a callable that makes it (only a
        delayed message is ever encoded twice).
        """
        eta = eta_of(message)
        if eta is None:
            return False
        seconds = eta_timestamp(eta, self.delayq_config.timezone)
        delay_key = delay_key_of(message)
        if delay_key is None and seconds <= time.time():
            return False
        stored = payload() if callable(payload) else payload
        scheduled = self.delayed(queue, message, stored, seconds)
        if delay_key is not None and delay_key.max_wait_ms:
            scheduled = replace(scheduled, eta_span=eta_span(stored, eta))
        if self.captured is not None:  # schedule_many stores it with its chunk
            if delay_key is not None:
                raise InvalidDelayKey("schedule_many does not take keyed messages")
            self.captured.append(scheduled)
        elif delay_key is None:
            self._write_to_store(lambda store: store.schedule(scheduled))
        else:
            outcome = self._write_to_store(lambda store: store.schedule_keyed(scheduled, delay_key))
            report(delay_key, outcome)
        return True

    def _write_to_store(self, write: Callable[[DelayedStore], T]) -> T:
        """Write to the store; an outage of a store at ``delayq_store_url`` backs off
        and raises ``StoreUnavailable`` (kombu retries it as a connection error)."""
        url = self.delayq_config.store_url
        if url is None:  # the broker's own Redis: kombu knows its errors and waits
            return write(self.delayed_store)
        backoff = _store_backoffs.setdefault(url, Backoff())
        backoff.wait()
        try:
            written = write(self.delayed_store)
        except STORE_OUTAGES as exc:
            backoff.failed()
            raise StoreUnavailable(
                f"the delayed store (delayq_store_url) is unreachable: {exc}"
            ) from exc
        backoff.succeeded()
        return written

    def delayed(
        self, queue: str, message: dict[str, Any], payload: bytes, eta_seconds: float
    ) -> Scheduled:
        """What the store keeps of a delayed message."""
        raise NotImplementedError

    @cached_property
    def control_exchange(self) -> str:
        """Where Celery's remote-control broadcasts go (read once: every publish asks)."""
        return pidbox_exchange(self._delayq_app.conf.control_exchange)

    def cancel_if_revoke(
        self, body: bytes, content_type: str | None, content_encoding: str | None
    ) -> None:
        """Cancel in the store the ids of an ``app.control.revoke`` broadcast passing
        through (revoke.py); a store outage fails the broadcast, as for a delayed task.
        Callers pass only what went to ``control_exchange``."""
        for task_id in revoked_task_ids(body, content_type, content_encoding):
            try:
                self.delayed_store.cancel(task_id)
            except STORE_OUTAGES as exc:
                raise StoreUnavailable(f"the delayed store is unreachable: {exc}") from exc


class VirtualChannelMixin(DelayqChannel):
    """For kombu's virtual transports (Redis, SQS, ...), where every non-fanout publish
    passes through ``Channel._put``: a message whose ``eta`` lies ahead goes to the
    delayed store instead. Due messages come back through ``put_now``."""

    #: Broker URL schemes this channel can serve (None: whatever kombu accepts).
    url_schemes: frozenset[str] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        app = delayq_app()
        if self.url_schemes is not None:
            check_broker_url(app, self.url_schemes)
        self.delayq_config = config_of(app)
        self._delayq_app = app
        self._delayed_store = None
        super().__init__(*args, **kwargs)

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        return lambda: VirtualPublisher(app.connection_for_write)

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish, or store until due. Inside a kombu publish batch a delayed message is
        stored at once rather than at the batch's flush."""
        if not self.store_if_future(queue, message, lambda: dumps(message).encode()):
            super()._put(queue, message, **kwargs)  # type: ignore[misc]

    def _put_fanout(self, exchange: str, message: dict[str, Any], *args: Any, **kw: Any) -> None:
        """Broadcast; a ``revoke`` also cancels its ids in the store first."""
        if exchange == self.control_exchange:
            self.cancel_if_revoke(
                kombu_message_body(message),
                message.get("content-type"),
                message.get("content-encoding"),
            )
        super()._put_fanout(exchange, message, *args, **kw)  # type: ignore[misc]

    def put_now(self, queue: str, message: dict[str, Any]) -> None:
        """kombu's own put, for a due message (never diverted to the store again)."""
        super()._put(queue, message)  # type: ignore[misc]

    def delayed(
        self, queue: str, message: dict[str, Any], payload: bytes, eta_seconds: float
    ) -> Scheduled:
        """What the store keeps of a delayed message: its queue as destination, its
        delivery tag as id, its task id."""
        return self.scheduled(queue, message, payload, eta_seconds, destination=queue)

    def scheduled(
        self,
        queue: str,
        message: dict[str, Any],
        payload: bytes,
        eta_seconds: float,
        **extra: Any,
    ) -> Scheduled:
        properties = message.get("properties") or {}
        task_id = (message.get("headers") or {}).get("id")
        return Scheduled(
            queue=queue,
            message_id=str(properties.get("delivery_tag") or uuid.uuid4()),
            task_id=str(task_id) if task_id is not None else None,
            due_ms=due_ms(eta_seconds),
            payload=payload,
            **extra,
        )

    def _purge(self, queue: str) -> int:
        """Empty the queue and its delayed messages; how many there were (``celery
        purge`` and ``app.control.purge()`` count them)."""
        return int(super()._purge(queue)) + self.delayed_store.purge(queue)  # type: ignore[misc]

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        """Delete the queue (kombu's own), then its delayed messages: they would
        otherwise be delivered to a queue that no longer exists."""
        super()._delete(queue, *args, **kwargs)  # type: ignore[misc]
        self.delayed_store.purge(queue)


def delayq_channel_class(app: Celery) -> type[DelayqChannel] | None:
    """The celery-delayq channel class of ``app``'s ``broker_transport``, or None."""
    transport = app.conf.broker_transport
    if not transport:
        return None
    try:
        cls: Any = get_transport_cls(transport) if isinstance(transport, str) else transport
    except (ImportError, KeyError, ValueError, AttributeError):
        return None
    # kombu's virtual transports name their channel class; py-amqp's, their connection's.
    channel = getattr(cls, "Channel", None) or getattr(
        getattr(cls, "Connection", None), "Channel", None
    )
    if isinstance(channel, type) and issubclass(channel, DelayqChannel):
        return channel
    return None


def uses_delayq(app: Celery) -> bool:
    """Whether ``app``'s ``broker_transport`` is a celery-delayq transport."""
    return delayq_channel_class(app) is not None


def check_store_setting(app: Celery) -> None:
    """At start (worker, beat, mover): a broker that is not Redis needs delayq_store_url."""
    channel = delayq_channel_class(app)
    own_store = channel is None or channel.keeps_own_store
    if not own_store and config_of(app).store_url is None:
        raise ConfigurationError(STORE_URL_NEEDED)


def delayq_app() -> Celery:
    """The app a new channel takes its ``delayq_*`` settings from."""
    current = get_current_app()
    if uses_delayq(current):
        return current
    candidates = [app for app in list(_get_active_apps()) if uses_delayq(app)]
    if not candidates:
        return current  # kombu used directly, with the transport named in code
    settings = {config_of(app) for app in candidates}
    if len(settings) > 1:
        raise ConfigurationError(
            "several Celery apps in this process use celery-delayq with different delayq_* "
            "settings; make the publishing app current with app.set_current() in this "
            "thread, or app.set_default()"
        )
    return candidates[0]
