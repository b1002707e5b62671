"""Reach the delayed store of a Celery app through the app's own broker connection.

Going through ``app.connection_for_write()`` gives the store exactly the Redis that
kombu publishes to (URL, TLS, Sentinel, ``global_keyprefix`` and all).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import Celery
from kombu.connection import Connection
from kombu.utils.url import maybe_sanitize_url

from .config import DelayqConfig
from .errors import ConfigurationError
from .mover import Mover, MoverThread
from .store import DelayedStore
from .transport import DelayedPublishMixin

logger = logging.getLogger(__name__)

TRANSPORT_HINT = 'set broker_transport = "celery_delayq.transport:Transport"'


def store_on(connection: Connection, config: DelayqConfig) -> DelayedStore:
    """The delayed store behind an open kombu connection of our transport."""
    channel = connection.default_channel
    if not isinstance(channel, DelayedPublishMixin):
        raise ConfigurationError(
            f"the broker transport is {type(channel).__module__}, not celery-delayq: "
            + TRANSPORT_HINT
        )
    return channel.store_for(config)


@contextmanager
def open_store(app: Celery) -> Iterator[DelayedStore]:
    """The app's delayed store, on a pooled broker connection, for short operations."""
    config = DelayqConfig.from_app(app)
    with app.connection_or_acquire() as connection:
        yield store_on(connection, config)


def store_connector(app: Celery) -> tuple[Callable[[], DelayedStore], Callable[[], None]]:
    """A (connect, close) pair for a long-lived mover with a connection of its own.

    ``connect`` may fail while Redis is down; the mover calls it again after a back-off.
    """
    config = DelayqConfig.from_app(app)
    connections: list[Connection] = []

    def connect() -> DelayedStore:
        close()
        connection = app.connection_for_write()
        connections.append(connection)
        return store_on(connection, config)

    def close() -> None:
        while connections:
            connections.pop().release()

    return connect, close


def mover_thread(app: Celery, name: str) -> MoverThread:
    """A mover for ``app`` in a thread of its own, with its own broker connection."""
    config = DelayqConfig.from_app(app)
    connect, close = store_connector(app)
    mover = Mover(
        connect, max_sleep=config.mover_max_sleep, retry_max=config.mover_retry_max, name=name
    )
    return MoverThread(mover, on_exit=close)


def log_startup(app: Celery, mover_mode: str) -> None:
    """The one line workers and beat log at start: where the store is, its key prefix and
    whether this process moves (the URL's password is masked)."""
    config = DelayqConfig.from_app(app)
    url = maybe_sanitize_url(app.conf.broker_write_url or app.conf.broker_url or "redis://")
    logger.info(
        "celery-delayq: delayed tasks in %s under key prefix %r; %s",
        url, config.key_prefix, mover_mode,
    )  # fmt: skip
