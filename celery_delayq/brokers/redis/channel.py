"""The kombu Redis channel that keeps future-ETA messages in the delayed store and
consumes atomically.

Every non-fanout publish passes through ``Channel._put``: the channel hands its
``Diverter`` (brokers/common/diverter.py) the message with the list kombu would push it
to, and a message whose ``eta`` header lies in the future is written to the delayed
store instead of that list; everything else goes exactly the way kombu's Redis transport
sends it. The store lives in the broker's own Redis unless ``delayq_store_url`` says
otherwise; a queue's purge and delete take its delayed messages with it, as they take
the messages in its lists. Consuming is the ``AtomicConsumer``'s (consume.py), and
unacknowledged messages come back without kombu's mutex (restore.py).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import redis
from celery import Celery
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str

from ...config.broker_url import REDIS_SCHEMES, SENTINEL_SCHEMES
from ...config.settings import DelayqConfig
from ...core.layout.keys import KeySpace
from ...core.lazy import first_use
from ...core.store import DelayedStore, Scheduled
from ..common.diverter import Outbound, virtual_outbound
from ..common.message import Delivered
from ..common.virtual_channel import VirtualDelayqChannel
from .polling import WAIT_TYPE, CheckedMessage

if TYPE_CHECKING:
    from ...core.handover import HandOver
    from ...core.handover.publishing import Publisher
    from .consume import AtomicConsumer


class Channel(VirtualDelayqChannel, kombu_redis.Channel):
    """kombu's Redis channel with the delayed store, consuming atomically."""

    #: kombu builds the messages it delivers with this class.
    Message = CheckedMessage
    keeps_own_store = True
    url_schemes = REDIS_SCHEMES

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.set_up_diverter(args[0])
        super().__init__(*args, **kwargs)

    @first_use
    def consumer(self) -> AtomicConsumer:
        """The atomic consume path, made (and consume.py imported) when the channel first
        consumes, restores or acknowledges: a channel that only publishes has none."""
        from .consume import AtomicConsumer

        return AtomicConsumer(self)

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        def publisher() -> Publisher:
            from .list_publisher import RedisListPublisher

            return RedisListPublisher(app.connection_for_write)

        return publisher

    @classmethod
    def settings_of(cls, transport: Any) -> Channel:
        """This kind of channel for ``transport`` (a kombu Redis transport), holding only
        the connection's settings, so that kombu's own ``_connparams`` and ``_get_pool``
        (URL, password, db, TLS, Sentinel and ``master_name``, socket and health options)
        and its priority steps and ``global_keyprefix`` build the store's client exactly
        as a channel would. kombu's ``__init__`` is not run: no ping, no channel id, no
        place in the poller, no diverter and no consumer; it is not a channel one can use.
        ``_disconnect_pools`` releases what its pool opened."""
        settings = cls.__new__(cls)
        settings.connection = transport
        settings._sentinel_manager = settings._async_sentinel_manager = None
        options = transport.client.transport_options
        for name in cls.from_transport_options:
            if name in options:
                setattr(settings, name, options[name])
        return settings

    @classmethod
    def store_of_transport(
        cls, transport: Any, config: DelayqConfig
    ) -> tuple[DelayedStore, Callable[[], None]]:
        settings = cls.settings_of(transport)
        store = settings.store_on_broker(config)

        def release() -> None:
            store.close()
            settings._disconnect_pools()

        return store, release

    def store_on_broker(self, config: DelayqConfig) -> DelayedStore:
        """A delayed store on this channel's Redis, with the given settings.

        The client is a plain (unprefixed) one on kombu's own connection pool: kombu's
        prefixing client would prefix only some keys of a script call, so the prefix
        is applied by ``KeySpace`` instead.
        """
        client = redis.Redis(connection_pool=self.pool)
        keys = KeySpace(self.global_keyprefix, config.key_prefix, config.store_shards)

        def handover() -> HandOver:  # on the first move: a publisher never imports it
            from ...core.handover.same_redis import SameRedisMove

            return SameRedisMove(
                client,
                queue_lists=self.real_queue_lists,
                ahead_ms=round(config.move_ahead * 1000),
                burst_ahead_ms=round(config.burst_ahead * 1000),
                release_log=config.release_log,
            )

        return DelayedStore(
            client,
            keys,
            config.move_batch_size,
            handover,
            wait_for=config.replica_wait,
            move_call_budget=config.move_call_budget,
        )

    # -- publishing --

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish, or store until due; either way refused when bigger than
        ``delayq_max_message_size``. Inside a kombu publish batch a delayed message is
        stored at once rather than at the batch's flush."""
        if not self.diverter.divert(self.outbound(queue, message)):
            self.diverter.check_immediate(queue, message)
            super()._put(queue, message, **kwargs)

    def outbound(self, queue: str, message: dict[str, Any]) -> Outbound:
        """The message as the diverter takes it: bound for the list kombu would push it
        to (priority and ``global_keyprefix`` applied; worked out only for a message
        that may be kept), with its queue's x-expires."""
        headers = message.get("headers")
        kept = isinstance(headers, dict) and self.diverter.may_keep(headers)
        return virtual_outbound(
            queue,
            message,
            destination=self.real_key(self._kombu_list(queue, message)) if kept else "",
            expires_ms=(getattr(self, "_expires", None) or {}).get(queue),
        )

    def _kombu_list(self, queue: str, message: dict[str, Any]) -> str:
        """The list kombu pushes ``message`` to: the queue's, or its priority's."""
        return self._q_for_pri(queue, self._get_message_priority(message, reverse=False))

    def delayed(
        self, queue: str, message: dict[str, Any], payload: bytes, eta_seconds: float
    ) -> Scheduled:
        """What the store keeps of a kombu message (ops/rescue moves vanilla ETA
        messages into the store with it): as ``_put`` would store it."""
        outbound = self.outbound(queue, message)._replace(
            payload=payload, destination=self.real_key(self._kombu_list(queue, message))
        )  # its eta may be in a protocol-1 body, not in its headers
        return self.diverter.scheduled(outbound, eta_seconds)

    # -- keys --

    @cached_property
    def _keyspace(self) -> KeySpace:
        return KeySpace(self.global_keyprefix)

    def real_key(self, kombu_key: str) -> str:
        """The Redis key of a kombu key (kombu's ``global_keyprefix`` applied)."""
        return self._keyspace.destination(kombu_key)

    def queue_lists(self, queue: str) -> list[str]:
        """The kombu lists of one queue: the bare name and its priority sub-lists."""
        steps = self.priority_steps
        return list(dict.fromkeys(self._q_for_pri(queue, step) for step in steps))

    def real_queue_lists(self, queue: str) -> list[str]:
        """The Redis keys of the queue's kombu lists."""
        return [self.real_key(name) for name in self.queue_lists(queue)]

    # -- queues --

    def _purge(self, queue: str) -> int:
        """Empty the queue, its delayed messages included, in one atomic call (two with
        ``delayq_store_url``); how many messages there were (``celery purge`` and
        ``app.control.purge()`` count them)."""
        store = self.diverter.store
        if self.diverter.config.store_url is not None:
            return int(super()._purge(queue)) + store.purge(queue)
        return store.purge(queue, self.real_queue_lists(queue))

    # -- restoring (restore.py, imported on the first need: a publisher never restores) --

    @property
    def qos(self) -> Any:
        """The lock-free QoS (restore.py), or kombu's plain one without ack emulation."""
        if self._qos is None:
            if self.ack_emulation:
                from .restore import LockFreeQoS

                self._qos = LockFreeQoS(self)
            else:
                self._qos = self.QoS(self)
        return self._qos

    def _do_restore_message(
        self,
        payload: dict[str, Any],
        exchange: str,
        routing_key: str,
        pipe: Any,
        leftmost: bool = False,
    ) -> None:
        """kombu's restore of one message, which also counts the redelivery: in the
        message's header, and per queue in Redis (in the restore's own transaction). A
        message its exchange routes to no queue goes to the dead letters (kombu's restore
        would drop it)."""
        if self.diverter.config.reliable_consume:
            from .restore import (
                REDELIVERED_KEY,
                count_redelivery,
                dead_letter_unroutable,
                routed_queues,
            )

            count_redelivery(payload)
            queues = routed_queues(self, exchange, routing_key)
            if not queues:
                dead_letter_unroutable(self, payload, exchange, routing_key)
                return
            for queue in queues:
                pipe.hincrby(self.real_key(REDELIVERED_KEY), queue, 1)
        super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)

    def redeliveries(self) -> dict[str, int]:
        """How many messages were put back on each queue since the count began: restored
        after their lease ran out, requeued by a reject, or given back by a closing
        channel."""
        from .restore import REDELIVERED_KEY

        client = redis.Redis(connection_pool=self.pool)
        counts = client.hgetall(self.real_key(REDELIVERED_KEY))
        return {bytes_to_str(queue): int(n) for queue, n in counts.items()}

    # -- consuming: kombu's BRPOP path, taken over by the atomic consumer --

    def _brpop_start(self, timeout: float | None = None) -> None:
        if self.consumer.on:
            return self.consumer.start(timeout)
        # kombu's own default timeout unless one is given
        return super()._brpop_start() if timeout is None else super()._brpop_start(timeout)

    def _brpop_read(self, **options: Any) -> bool:
        if self.consumer.on:
            return self.consumer.read()
        return bool(super()._brpop_read(**options))

    def _poll_error(self, type: str, **options: Any) -> Any:
        if type.startswith(WAIT_TYPE):
            return self.consumer.waits.read(type[len(WAIT_TYPE) :])
        return super()._poll_error(type, **options)

    def basic_consume(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        no_ack = kwargs["no_ack"] if "no_ack" in kwargs else bool(args and args[0])
        self.consumer.consumed(queue, no_ack)
        return super().basic_consume(queue, *args, **kwargs)

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        if self.consumer.on:
            return self.consumer.get(queue, no_ack)
        return super().basic_get(queue, no_ack, **kwargs)

    def close(self) -> None:
        consumer = self.__dict__.get("consumer")  # none if the channel never consumed
        if consumer is not None:
            consumer.waits.stop()
        super().close()

    # -- what the worker's poison guard asks of a delivered message (worker/poison.py) --

    def delivered(self, message: Any) -> Delivered:
        return self.consumer.delivered(message)

    def delivery_count(self, message: Any) -> int:
        return self.consumer.delivery_count(message)


class SentinelChannel(Channel, kombu_redis.SentinelChannel):
    """The same channel behind Redis Sentinel: kombu's ``SentinelChannel`` finds the
    master (it subclasses kombu's Channel, as ours does, so its pool comes first)."""

    url_schemes = SENTINEL_SCHEMES
