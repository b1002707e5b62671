"""Kombu Redis transport whose channel keeps future-ETA messages in the delayed store.

Select it with Celery settings only::

    broker_url = "redis://localhost:6379/0"        # or rediss://
    broker_transport = "celery_delayq.transport:Transport"

or, behind Redis Sentinel, ``sentinel://...`` with
``broker_transport = "celery_delayq.transport:SentinelTransport"``.

Every non-fanout publish passes through ``Channel._put``: a message whose ``eta``
header lies in the future is written to the delayed store instead of the queue
list; everything else goes exactly the way kombu's Redis transport sends it.
Fanout (broadcast) messages are never delayed.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import redis
from celery import signals
from kombu.transport import redis as kombu_redis
from kombu.utils.json import dumps

from .app_lookup import delayq_app
from .config import REDIS_SCHEMES, SENTINEL_SCHEMES, DelayqConfig, check_broker_url
from .keys import KeySpace
from .message import due_ms, eta_of, eta_timestamp
from .store import DelayedStore


class DelayedPublishMixin:
    """Adds the delayed store to a kombu Redis channel and diverts future ETAs to it."""

    #: Broker URL schemes this channel can serve.
    url_schemes: frozenset[str] = REDIS_SCHEMES

    # Provided by kombu's Redis Channel.
    global_keyprefix: str
    pool: redis.ConnectionPool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        app = delayq_app()
        check_broker_url(app, self.url_schemes)
        self.delayq_config = DelayqConfig.from_app(app)
        self._delayed_store: DelayedStore | None = None
        super().__init__(*args, **kwargs)

    def store_for(self, config: DelayqConfig) -> DelayedStore:
        """A delayed store on this channel's Redis, with the given settings.

        The client is a plain (unprefixed) one on kombu's own connection pool: kombu's
        prefixing client would prefix only some keys of a script call, so the prefix
        is applied by ``KeySpace`` instead.
        """
        client = redis.Redis(connection_pool=self.pool)
        keys = KeySpace(self.global_keyprefix, config.key_prefix)
        return DelayedStore(client, keys, config.move_batch_size)

    @property
    def delayed_store(self) -> DelayedStore:
        if self._delayed_store is None:
            self._delayed_store = self.store_for(self.delayq_config)
        return self._delayed_store

    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        """Publish, or store until due. Inside a kombu publish batch a delayed message is
        stored at once rather than at the batch's flush."""
        eta = eta_of(message)
        if eta is not None:
            seconds = eta_timestamp(eta, self.delayq_config.timezone)
            if seconds > time.time():
                self._put_delayed(queue, message, seconds)
                return
        super()._put(queue, message, **kwargs)  # type: ignore[misc]

    def _put_delayed(self, queue: str, message: dict[str, Any], eta_seconds: float) -> None:
        payload = dumps(message).encode()
        self.delayed_store.schedule(**self.delayed_fields(queue, message, payload, eta_seconds))

    def delayed_fields(
        self, queue: str, message: dict[str, Any], payload: bytes, eta_seconds: float
    ) -> dict[str, Any]:
        """What the store keeps of a delayed message: the list kombu would push it to
        (priority and ``global_keyprefix`` applied), its delivery tag as id, its task id."""
        properties = message.get("properties") or {}
        headers = message.get("headers") or {}
        priority = self._get_message_priority(message, reverse=False)  # type: ignore[attr-defined]
        kombu_list = self._q_for_pri(queue, priority)  # type: ignore[attr-defined]
        task_id = headers.get("id")
        return {
            "queue": queue,
            "message_id": str(properties.get("delivery_tag") or uuid.uuid4()),
            "task_id": str(task_id) if task_id is not None else None,
            "due_ms": due_ms(eta_seconds),
            "destination": KeySpace(self.global_keyprefix).destination(kombu_list),
            "payload": payload,
        }


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


def _add_worker_mover(sender: Any, **_: Any) -> None:
    from .bootstep import add_worker_mover

    add_worker_mover(sender)


# A worker loads this module when it first looks at its broker transport, just before
# it sends ``worker_init`` and builds its blueprint: the one moment a settings-only
# plugin can add a bootstep to the worker.
signals.worker_init.connect(_add_worker_mover, weak=False, dispatch_uid="celery_delayq.mover")
