"""Messages sent the vanilla way (plain kombu transport), as an app did before it switched
to celery-delayq: what the rescue tests move into the store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from celery import Celery

from celery_delayq.brokers.connect import open_store

#: kombu's list for priority 3 to 5 of queue "default".
PRIORITY_LIST = "default\x06\x163"


def apps(
    make_app: Callable[..., Celery], prefix: str = "", **settings: object
) -> tuple[Celery, Celery]:
    """(vanilla publisher, celery-delayq app) on the same Redis and key prefix."""
    options = {"broker_transport_options": {"global_keyprefix": prefix}} if prefix else {}
    vanilla = make_app(broker_transport="redis", **options, **settings)
    return vanilla, make_app(**options, **settings)


def in_store(app: Celery) -> dict[str, tuple[str, str, int, bytes]]:
    """Task id -> (queue, destination list, due ms, payload) of every pending message."""
    with open_store(app) as store:
        return {
            m.task_id: (m.queue, m.record.destination, round(m.due * 1000), m.record.payload)
            for m in store.pending(limit=1000)
        }


def past() -> datetime:
    """A minute ago: an ETA that is no longer in the future."""
    return datetime.now(timezone.utc) - timedelta(minutes=1)
