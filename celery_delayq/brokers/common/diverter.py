"""The decision to keep a message in the delayed store (its ``eta`` lies ahead, or its
task is flow-controlled: config/limits.py), and the write there: every broker's channel
holds a ``Diverter`` and hands it one ``Outbound`` value per publish (queue, headers,
destination, payload), before kombu's own publish. Fanout (broadcast) messages are never
delayed; a revoke broadcast also cancels its ids.

kombu gives a channel no reference to the Celery app that opened its connection, and
``current_app`` is Celery's empty fallback app in any thread that did not create the
app (a thread-pool web server, for one). So a channel takes its settings from the
thread's current app if it selects this transport, else from the one app in the
process that does (``delayq_app``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

from celery import Celery
from celery._state import _get_active_apps, get_current_app
from kombu.connection import Connection
from kombu.transport import get_transport_cls
from kombu.transport.base import Transport
from kombu.utils.json import dumps

from ...config.broker_url import check_broker_url
from ...config.errors import STORE_OUTAGES, ConfigurationError, StoreUnavailable, check_message_size
from ...config.limits import TaskLimits, limits_of, mark_slot
from ...config.settings import DelayqConfig, config_of
from ...core.store import DelayedStore, Scheduled
from .message import due_ms, eta_span, eta_timestamp

if TYPE_CHECKING:
    from typing import TypeGuard  # Python 3.10+; only the type checker reads it

    from ...core.handover.publishing import Publisher
    from ...core.moving.backoff import Backoff

#: key_headers.KEY_HEADER (a test holds them equal): only a keyed publish imports key_headers.
KEY_HEADER = "delayq_key"

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


class Outbound(NamedTuple):
    """What the diverter needs of a message a channel is about to publish."""

    queue: str  # the queue it belongs to (the store groups by it)
    headers: Mapping[str, Any]  # Celery's message headers: eta, id, delay key
    #: where it goes when due (a Redis list, an exchange and key, a queue); only a
    #: message that may be kept (``Diverter.may_keep``) needs it
    destination: str
    payload: bytes | Callable[[], bytes]  # the envelope to store, or how to make it
    message_id: str | None = None  # its delivery tag (a new id when it has none)
    expires_ms: int | None = None  # its queue's x-expires, when declared
    #: raises what the broker's client will raise publishing the kept message when it is
    #: due (destination, payload): a message the broker refuses fails its publish now,
    #: as a publish made at once would, instead of every hand-over of it
    validate: Callable[[str, bytes], None] | None = None


class DelayqChannel(Protocol):
    """What the rest of celery-delayq uses of a broker's channel: its diverter, its
    store, and how a mover publishes to this kind of broker."""

    #: Whether the broker itself can hold the store (a Redis broker); otherwise
    #: delayq_store_url is needed.
    keeps_own_store: bool
    diverter: Diverter

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        """How a mover of ``app`` opens its publisher to this kind of broker."""

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        """A delayed store with the given settings, for this channel's broker."""

    @classmethod
    def store_of_transport(
        cls, transport: Any, config: DelayqConfig
    ) -> tuple[DelayedStore, Callable[[], None]]:
        """The store in the broker itself, for a kombu transport of this kind, built
        without a channel; and what releases its connections (a Redis broker only)."""


def is_delayq_channel(channel: object) -> TypeGuard[DelayqChannel]:
    """Whether ``channel`` (an instance, or a class) is one of celery-delayq's."""
    return isinstance(getattr(channel, "keeps_own_store", None), bool) and hasattr(
        channel, "publisher_factory"
    )


class Diverter:
    """Keeps a message whose ``eta`` lies ahead (or that has a delay key) in the store
    instead of the broker; a channel holds one, made with ``Diverter.of_current_app``."""

    def __init__(self, app: Celery, open_store: Callable[[DelayqConfig], DelayedStore]) -> None:
        self.app = app
        self.config = config_of(app)
        self._open_store = open_store
        self._store: DelayedStore | None = None
        #: While set (scheduling/bulk.py's schedule_many), delayed messages are collected
        #: here instead of written one by one.
        self.captured: list[Scheduled] | None = None
        #: Whether a capture collects messages already due too (``capture``).
        self.capture_due = False

    @classmethod
    def of_current_app(
        cls,
        open_store: Callable[[DelayqConfig], DelayedStore],
        url_schemes: frozenset[str] | None = None,
        needs_store_url: bool = False,
        broker: Connection | None = None,
    ) -> Diverter:
        """The diverter of a new channel of ``broker``, with the settings of the app it
        serves (``delayq_app``), its broker URL checked against ``url_schemes``."""
        app = delayq_app(broker)
        if url_schemes is not None:
            check_broker_url(app, url_schemes)
        diverter = cls(app, open_store)
        if needs_store_url and diverter.config.store_url is None:
            raise ConfigurationError(STORE_URL_NEEDED)
        return diverter

    @property
    def store(self) -> DelayedStore:
        """The store delayed messages go to (opened on first use)."""
        if self._store is None:
            self._store = self._open_store(self.config)
        return self._store

    @contextmanager
    def capture(self, due_too: bool = False) -> Iterator[list[Scheduled]]:
        """While open, the delayed messages this channel would store are collected in
        the list instead, for a caller that stores them in its own atomic call (bulk
        scheduling's chunks, periodic occurrences under their entry's mark).

        ``due_too``: a message whose ``eta`` has passed is collected as well, not
        published. Periodic occurrences need it: one published outside its entry's
        mark runs again when another beat writes the same occurrence."""
        captured: list[Scheduled] = []
        self.captured, self.capture_due = captured, due_too
        try:
            yield captured
        finally:
            self.captured, self.capture_due = None, False

    @cached_property
    def limits(self) -> TaskLimits:
        """The flow-control limits of the app's tasks (config/limits.py)."""
        return limits_of(self.app, self.config)

    def may_keep(self, headers: Mapping[str, Any]) -> bool:
        """Whether a message with these headers may be kept (``divert``): it has an
        ``eta``, or its task is flow-controlled."""
        return headers.get("eta") is not None or self.limits.gate_of(headers) is not None

    def divert(self, message: Outbound) -> bool:
        """Keep ``message`` in the store when its ``eta`` lies ahead, when it has a
        delay key (key_headers.py), or when its task is flow-controlled (then even when
        already due: it waits for its limits); whether it was kept."""
        gate = self.limits.gate_of(message.headers)
        # slots are taken at release by the Redis broker's own move only (move_due.lua)
        mark_slot(message.headers, message.queue, gate)
        eta = message.headers.get("eta")
        if eta is None and gate is None:
            return False
        seconds = time.time() if eta is None else eta_timestamp(eta, self.config.timezone)
        if message.headers.get(KEY_HEADER) is not None:
            return self._divert_keyed(message, eta, seconds, gate)
        return self._divert_unkeyed(message, seconds, gate)

    def _divert_unkeyed(self, message: Outbound, seconds: float, gate: bytes | None) -> bool:
        due_too = gate is not None or (self.captured is not None and self.capture_due)
        if seconds <= time.time() and not due_too:
            return False
        scheduled = self.scheduled(message, seconds)._replace(gate=gate)
        if self.captured is not None:  # the capturing caller stores it (capture)
            self.captured.append(scheduled)
        else:
            self._write(lambda store: store.schedule(scheduled))
        return True

    def _divert_keyed(
        self, message: Outbound, eta: Any, seconds: float, gate: bytes | None
    ) -> bool:
        """A message with delay-key headers: kept even when already due."""
        from .key_headers import InvalidDelayKey, delay_key_of, report

        delay_key = delay_key_of(message.headers)
        if delay_key is None:  # a retry: stored without its key
            return self._divert_unkeyed(message, seconds, gate)
        if self.captured is not None:
            raise InvalidDelayKey("keyed messages cannot be captured (schedule_many)")
        scheduled = self.scheduled(message, seconds)._replace(gate=gate)
        if delay_key.max_wait_ms and eta is not None:
            scheduled = scheduled._replace(eta_span=eta_span(scheduled.payload, eta))
        outcome = self._write(lambda store: store.schedule_keyed(scheduled, delay_key))
        report(delay_key, outcome)
        return True

    def scheduled(self, message: Outbound, eta_seconds: float) -> Scheduled:
        """What the store keeps of a message due at ``eta_seconds``."""
        task_id = message.headers.get("id")
        payload = message.payload() if callable(message.payload) else message.payload
        destination = message.destination
        check_message_size(len(payload), self.config.max_message_size, message.queue, task_id)
        if message.validate is not None:
            message.validate(destination, payload)
        no_eta = not message.headers.get("eta")
        return Scheduled(
            queue=message.queue,
            message_id=message.message_id or str(uuid.uuid4()),
            task_id=str(task_id) if task_id is not None else None,
            # without an ETA (a limited task's), due now: it enters its bucket in the
            # store's call (schedule_gated.lua, which also takes a due time that this
            # host's clock put after the store's back to the store's now: no_eta)
            due_ms=due_ms(eta_seconds, no_eta),
            destination=destination,
            payload=payload,
            expires_ms=message.expires_ms,
            no_eta=no_eta,
        )

    def check_immediate(self, queue: str, message: Mapping[str, Any]) -> None:
        """Refuse a kombu virtual transport's message for ``queue`` that is not kept
        (``divert`` said no) when bigger than ``delayq_max_message_size``: on a Redis
        broker with ``delayq_reliable_consume`` the consume script copies every message,
        as a move does a kept one. The size is that of kombu's envelope, as it is pushed
        (ASCII JSON: as many bytes as characters)."""
        limit = self.config.max_message_size
        if limit and self.config.reliable_consume:
            headers = message.get("headers")
            task_id = headers.get("id") if isinstance(headers, Mapping) else None
            check_message_size(len(dumps(message)), limit, queue, task_id)

    def _write(self, write: Callable[[DelayedStore], T]) -> T:
        """Write to the store; an outage of a store at ``delayq_store_url`` backs off
        and raises ``StoreUnavailable`` (kombu retries it as a connection error)."""
        url = self.config.store_url
        if url is None:  # the broker's own Redis: kombu knows its errors and waits
            return write(self.store)
        from ...core.moving.backoff import Backoff  # only a separate store's writes back off

        backoff = _store_backoffs.setdefault(url, Backoff())
        backoff.wait()
        try:
            written = write(self.store)
        except STORE_OUTAGES as exc:
            backoff.failed()
            raise StoreUnavailable(
                f"the delayed store (delayq_store_url) is unreachable: {exc}"
            ) from exc
        backoff.succeeded()
        return written

    @cached_property
    def control_exchange(self) -> str:
        """Where Celery's remote-control broadcasts go (read once: every publish asks)."""
        # kombu's Mailbox names it so (and a publish must not import revoke.py for it).
        return f"{self.app.conf.control_exchange}.pidbox"

    def cancel_if_revoke(
        self,
        exchange: str,
        body: bytes,
        content_type: str | None,
        content_encoding: str | None,
    ) -> None:
        """Cancel in the store the ids of an ``app.control.revoke`` broadcast passing
        through ``exchange`` (revoke.py); a store outage fails the broadcast, as for a
        delayed task."""
        if exchange != self.control_exchange:
            return
        from .revoke import revoked_task_ids  # a broadcast: publishes never import it

        for task_id in revoked_task_ids(body, content_type, content_encoding):
            try:
                self.store.cancel(task_id)
            except STORE_OUTAGES as exc:
                raise StoreUnavailable(f"the delayed store is unreachable: {exc}") from exc

    def cancel_if_revoke_in(self, exchange: str, message: Mapping[str, Any]) -> None:
        """``cancel_if_revoke`` for a kombu virtual transport's message."""
        if exchange == self.control_exchange:
            from .revoke import kombu_message_body

            body = kombu_message_body(message)
            content = (message.get("content-type"), message.get("content-encoding"))
            self.cancel_if_revoke(exchange, body, *content)


def virtual_outbound(
    queue: str,
    message: Mapping[str, Any],
    destination: str,
    expires_ms: int | None = None,
    validate: Callable[[str, bytes], None] | None = None,
) -> Outbound:
    """The ``Outbound`` of a kombu virtual transport's message: its delivery tag as id,
    stored as kombu's JSON envelope (``validate``: see ``Outbound``)."""
    headers = message.get("headers")
    properties = message.get("properties") or {}
    tag = properties.get("delivery_tag")
    return Outbound(
        queue=queue,
        headers=headers if isinstance(headers, dict) else {},
        destination=destination,
        payload=lambda: dumps(message).encode(),
        message_id=str(tag) if tag else None,
        expires_ms=expires_ms,
        validate=validate,
    )


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
    if isinstance(channel, type) and is_delayq_channel(channel):
        return cast("type[DelayqChannel]", channel)
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


def delayq_app(broker: Connection | None = None) -> Celery:
    """The app a new channel takes its ``delayq_*`` settings from: the current app, else
    the one celery-delayq app of the process, else the one among them whose broker URL is
    ``broker``'s (the connection the channel belongs to)."""
    current = get_current_app()
    if uses_delayq(current):
        return current
    candidates = [app for app in list(_get_active_apps()) if uses_delayq(app)]
    if not candidates:
        return current  # kombu used directly, with the transport named in code
    if len({config_of(app) for app in candidates}) > 1 and broker is not None:
        candidates = [app for app in candidates if _connects_to(app, broker)] or candidates
    if len({config_of(app) for app in candidates}) > 1:
        raise ConfigurationError(
            "several Celery apps in this process use celery-delayq with different delayq_* "
            "settings; make the publishing app current with app.set_current() in this "
            "thread, or app.set_default()"
        )
    return candidates[0]


def _connects_to(app: Celery, broker: Connection) -> bool:
    """Whether ``broker`` is ``app``'s broker, at its URL or one of its failover URLs
    (builds connection objects only: no I/O)."""
    own = app.connection_for_write()
    addresses = {_address(each) for each in [Connection(url) for url in own.alt] or [own]}
    return _address(broker) in addresses


def _address(connection: Connection) -> tuple[object, ...]:
    return (connection.hostname, connection.port, connection.virtual_host, connection.userid)
