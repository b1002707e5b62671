"""How a Celery app reaches its delayed store, and the movers that run beside it.

``StoreFactory`` is the one road: on a Redis broker the store's client is built from the
app's broker connection by kombu's own code (URL, TLS, Sentinel, ``global_keyprefix`` and
all) without building a kombu channel. ``open_store`` is for short operations on a pooled
connection; a mover keeps a ``StoreConnection`` of its own, which it reopens after an
outage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

import redis
from celery import Celery
from kombu.connection import Connection

from ..config.errors import ConfigurationError
from ..config.settings import config_of
from ..core.handover.publishing import Publisher
from ..core.health.health_checks import OK, server_findings
from ..core.moving.mover import Mover, MoverThread
from ..core.store import DelayedStore
from ..core.topology import redis_location
from ..core.urls import sanitize_url
from .common.diverter import (
    STORE_URL_NEEDED,
    check_store_setting,
    delayq_channel_class,
    is_delayq_channel,
)
from .common.separate_store import separate_store

logger = logging.getLogger(__name__)

TRANSPORT_HINT = 'set broker_transport = "celery_delayq.transport:Transport"'


class StoreFactory:
    """How an app reaches its delayed store, chosen once from its broker kind: the store
    at ``delayq_store_url`` when set, else the one in the broker's own Redis (a Redis
    broker only), built from the broker connection's settings without a kombu channel;
    and the publisher that hands due messages back to the broker."""

    def __init__(self, app: Celery) -> None:
        channel = delayq_channel_class(app)
        if channel is None:
            raise ConfigurationError(
                f"the broker transport {app.conf.broker_transport!r} is not celery-delayq's: "
                + TRANSPORT_HINT
            )
        self.app = app
        self.channel = channel
        self.config = config_of(app)

    def publisher(self) -> Callable[[], Publisher]:
        """How a store at delayq_store_url opens its publisher to this broker."""
        return self.channel.publisher_factory(self.app)

    def open(self, connection: Connection | None) -> tuple[DelayedStore, Callable[[], None]]:
        """The store that belongs to ``connection`` (one of the app's broker connections;
        None with delayq_store_url), and what releases the connections it opens."""
        if self.config.store_url is not None:
            store = separate_store(self.config, self.publisher())
            return store, store.close
        if connection is None or not self.channel.keeps_own_store:
            raise ConfigurationError(STORE_URL_NEEDED)
        return self.channel.store_of_transport(connection.transport, self.config)

    def on_pooled(self, connection: Connection | None) -> tuple[DelayedStore, Callable[[], None]]:
        """The store for short operations on ``connection``, one of the app's pooled
        broker connections (None with delayq_store_url): on a Redis broker, on that
        connection's own channel and pool, so the operation opens no connection of its
        own (as a mover's store does); and what releases it."""
        if self.config.store_url is not None or connection is None:
            return self.open(None)  # at delayq_store_url, or the error saying it is needed
        if not self.channel.keeps_own_store:
            raise ConfigurationError(STORE_URL_NEEDED)
        channel = connection.default_channel
        if not is_delayq_channel(channel):  # a connection of another app's transport
            raise ConfigurationError(f"{channel!r} is not celery-delayq's: {TRANSPORT_HINT}")
        store = channel.store_for(self.config)  # with no delayq_store_url: the broker's
        return store, store.close


def publisher_factory(app: Celery) -> Callable[[], Publisher]:
    """How ``app``'s movers open a publisher to its broker (a store at delayq_store_url)."""
    return StoreFactory(app).publisher()


@contextmanager
def open_store(app: Celery, *, fail_fast: bool = False) -> Iterator[DelayedStore]:
    """The app's delayed store for short operations: on a pooled broker connection, or
    at ``delayq_store_url`` (then the broker is reached only to deliver).

    ``fail_fast``: a single connection attempt to the broker's Redis rather than kombu's
    retries (seconds), for a web page that should say at once that Redis is down.
    """
    factory = StoreFactory(app)
    with ExitStack() as stack:
        connection = None  # the store at delayq_store_url, or the error that it is needed
        if factory.config.store_url is None and factory.channel.keeps_own_store:
            connection = stack.enter_context(app.connection_or_acquire())
            if fail_fast:
                connection.ensure_connection(max_retries=0)
        store, release = factory.on_pooled(connection)  # a page, a scrape: no connection
        stack.callback(release)
        yield store


class StoreConnection:
    """A store on a broker connection of its own, for a long-lived mover.

    ``open`` may fail while Redis is down; the mover calls it again after a back-off,
    and each call first releases the connections the previous one made.
    """

    def __init__(self, app: Celery) -> None:
        self.factory = StoreFactory(app)
        self._connection: Connection | None = None
        self._release: Callable[[], None] | None = None

    def open(self) -> DelayedStore:
        self.close()
        if self.factory.config.store_url is None:
            self._connection = self.factory.app.connection_for_write()
        store, self._release = self.factory.open(self._connection)
        return store

    def close(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None
        if self._connection is not None:
            self._connection.release()
            self._connection = None


def mover_thread(app: Celery, name: str) -> MoverThread:
    """A mover for ``app`` in a thread of its own, with its own broker connection."""
    check_store_setting(app)
    config = config_of(app)
    connection = StoreConnection(app)
    mover = Mover(
        connection.open,
        max_sleep=config.mover_max_sleep,
        retry_max=config.mover_retry_max,
        name=name,
        on_connect=warn_about_risks,
    )
    return MoverThread(mover, on_exit=connection.close)


def warn_about_risks(store: DelayedStore) -> None:
    """Log, at every (re)connect of a mover, the Redis settings that put delayed tasks
    at risk (no persistence, an evicting memory policy, ...)."""
    try:
        logger.debug("celery-delayq: mover connected to %s", redis_location(store.client))
        findings = server_findings(store.client)
    except redis.RedisError as exc:  # a check must never keep a mover from moving
        logger.warning("celery-delayq: cannot check the store's Redis settings: %s", exc)
        return
    for finding in findings:
        if finding.level != OK:
            logger.warning("celery-delayq: %s: %s; %s", finding.check, finding.message, finding.fix)


def log_startup(app: Celery, mover_mode: str) -> None:
    """The one line workers and beat log at start: where the store is, its key prefix and
    whether this process moves (the URL's password is masked)."""
    config = config_of(app)
    url = sanitize_url(
        config.store_url or app.conf.broker_write_url or app.conf.broker_url or "redis://"
    )
    logger.info(
        "celery-delayq: delayed tasks in %s under key prefix %r; %s",
        url,
        config.key_prefix,
        mover_mode,
    )
