"""The kombu Redis channel that keeps future-ETA messages in the delayed store.

Every non-fanout publish passes through ``Channel._put`` (brokers/common/diverter.py's
``VirtualChannelMixin``): a message whose ``eta`` header lies in the future is written to
the delayed store instead of the queue list; everything else goes exactly the way
kombu's Redis transport sends it. Fanout (broadcast) messages are never delayed. The
store lives in the broker's own Redis unless ``delayq_store_url`` says otherwise; a
queue's purge and delete take its delayed messages with it, as they take the messages
in its lists.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

import redis
from celery import Celery
from kombu.utils.encoding import bytes_to_str

from ...core.handover import Publisher, SameRedisMove
from ...core.keys import KeySpace
from ...core.store import DelayedStore, Scheduled
from ..common.diverter import VirtualChannelMixin
from ..common.settings import REDIS_SCHEMES, DelayqConfig
from .list_publisher import RedisListPublisher
from .restore import REDELIVERED_KEY, LockFreeQoS, count_redelivery


class DelayedPublishMixin(VirtualChannelMixin):
    """Adds the delayed store to a kombu Redis channel and diverts future ETAs to it, and
    restores unacknowledged messages without kombu's mutex (restore.py)."""

    url_schemes: frozenset[str] | None = REDIS_SCHEMES
    keeps_own_store = True
    QoS = LockFreeQoS

    # Provided by kombu's Redis Channel.
    global_keyprefix: str
    pool: redis.ConnectionPool
    priority_steps: list[int]

    @classmethod
    def publisher_factory(cls, app: Celery) -> Callable[[], Publisher]:
        return lambda: RedisListPublisher(app.connection_for_write)

    def _do_restore_message(
        self,
        payload: dict[str, Any],
        exchange: str,
        routing_key: str,
        pipe: Any,
        leftmost: bool = False,
    ) -> None:
        """kombu's restore of one message, which also counts the redelivery: in the
        message's header, and per queue in Redis (in the restore's own transaction)."""
        if self.delayq_config.reliable_consume:
            count_redelivery(payload)
            # a message kombu cannot route is logged by kombu's restore below
            with suppress(Exception):
                for queue in self._lookup(exchange, routing_key):  # type: ignore[attr-defined]
                    pipe.hincrby(self.real_key(REDELIVERED_KEY), queue, 1)
        super()._do_restore_message(payload, exchange, routing_key, pipe, leftmost)  # type: ignore[misc]

    def redeliveries(self) -> dict[str, int]:
        """How many messages were put back on each queue since the count began: restored
        after their lease ran out, requeued by a reject, or given back by a closing
        channel."""
        client = redis.Redis(connection_pool=self.pool)
        counts = client.hgetall(self.real_key(REDELIVERED_KEY))
        return {bytes_to_str(queue): int(n) for queue, n in counts.items()}

    def store_on_broker(self, config: DelayqConfig) -> DelayedStore:
        """A delayed store on this channel's Redis, with the given settings.

        The client is a plain (unprefixed) one on kombu's own connection pool: kombu's
        prefixing client would prefix only some keys of a script call, so the prefix
        is applied by ``KeySpace`` instead.
        """
        client = redis.Redis(connection_pool=self.pool)
        keys = KeySpace(self.global_keyprefix, config.key_prefix, config.store_shards)
        handover = SameRedisMove(
            client,
            queue_lists=self.real_queue_lists,
            ahead_ms=round(config.move_ahead * 1000),
            burst_ahead_ms=round(config.burst_ahead * 1000),
        )
        return DelayedStore(
            client,
            keys,
            config.move_batch_size,
            handover,
            wait_for=config.replica_wait,
            move_call_budget=config.move_call_budget,
        )

    def delayed(
        self, queue: str, message: dict[str, Any], payload: bytes, eta_seconds: float
    ) -> Scheduled:
        """What the store keeps of a delayed message: the list kombu would push it to
        (priority and ``global_keyprefix`` applied), its delivery tag as id, its task id."""
        priority = self._get_message_priority(message, reverse=False)  # type: ignore[attr-defined]
        kombu_list = self._q_for_pri(queue, priority)  # type: ignore[attr-defined]
        return self.scheduled(
            queue,
            message,
            payload,
            eta_seconds,
            destination=self.real_key(kombu_list),
            expires_ms=(getattr(self, "_expires", None) or {}).get(queue),
        )

    def real_key(self, kombu_key: str) -> str:
        """The Redis key of a kombu key (kombu's ``global_keyprefix`` applied)."""
        return KeySpace(self.global_keyprefix).destination(kombu_key)

    def queue_lists(self, queue: str) -> list[str]:
        """The kombu lists of one queue: the bare name and its priority sub-lists."""
        steps = self.priority_steps
        return list(dict.fromkeys(self._q_for_pri(queue, step) for step in steps))  # type: ignore[attr-defined]

    def real_queue_lists(self, queue: str) -> list[str]:
        """The Redis keys of the queue's kombu lists."""
        return [self.real_key(name) for name in self.queue_lists(queue)]

    def _purge(self, queue: str) -> int:
        """Empty the queue, its delayed messages included, in one atomic call (two with
        ``delayq_store_url``); how many messages there were (``celery purge`` and
        ``app.control.purge()`` count them)."""
        if self.delayq_config.store_url is not None:
            return super()._purge(queue)
        return self.delayed_store.purge(queue, self.real_queue_lists(queue))
