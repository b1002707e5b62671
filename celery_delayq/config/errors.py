"""Exceptions raised by celery-delayq."""

from __future__ import annotations

import redis
from celery.exceptions import ImproperlyConfigured
from redis.exceptions import ClusterDownError, SlotNotCoveredError, TryAgainError


class ConfigurationError(ImproperlyConfigured):
    """A ``delayq_*`` setting or the broker URL cannot work with celery-delayq."""


class InvalidETA(ValueError):
    """A message's ``eta`` header cannot be read as a point in time.

    Raised at publish time, before anything is written, so the caller sees the
    mistake instead of a task that silently never runs.
    """


class MessageTooLarge(ValueError):
    """A message is bigger than ``delayq_max_message_size``.

    Raised at publish time, before anything is written: every script call that copies a
    message holds Redis for all its clients, so a big one would delay every other queue.
    """

    def __init__(self, size: int, limit: int, queue: str, task_id: object = None) -> None:
        self.size, self.limit, self.queue, self.task_id = size, limit, queue, task_id
        task = f" (task {task_id})" if task_id is not None else ""
        super().__init__(
            f"message of {size:,} bytes for queue {queue!r}{task} is bigger than "
            f"delayq_max_message_size ({limit:,} bytes); nothing was stored. Pass a reference "
            "to the data (a database row, an object store key) instead, or raise the setting"
        )


def check_message_size(size: int, limit: int, queue: str, task_id: object = None) -> None:
    """Refuse a message of ``size`` bytes above ``limit`` (0: no limit)."""
    if limit and size > limit:
        raise MessageTooLarge(size, limit, queue, task_id)


class StoreUnavailable(ConnectionError):
    """The Redis at ``delayq_store_url`` cannot be reached to store a delayed message.

    A ``ConnectionError`` (an ``OSError``), so kombu treats it as a recoverable connection
    error of any transport: Celery's publish retry policy applies, and the caller finally
    sees kombu's ``OperationalError``, as for a broker outage.
    """


#: What a store outage looks like to a publisher: the connection failing, or a Redis
#: Cluster between a master's death and its replica's promotion (CLUSTERDOWN, a slot no
#: node serves yet, TRYAGAIN while a slot moves), once redis-py's own retries ran out.
STORE_OUTAGES: tuple[type[Exception], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    SlotNotCoveredError,
    TryAgainError,
)
