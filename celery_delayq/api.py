"""Public operations on pending delayed tasks of a Celery app.

Unlike Celery's ``revoke``, which only reaches the memory of live workers, these act
on the store in Redis, so their effect is permanent.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from celery import Celery
from celery.utils.time import maybe_make_aware

from .connect import open_store
from .message import due_ms, with_eta
from .store import QueueBacklog


def cancel(app: Celery, task_id: str) -> int:
    """Remove every pending delayed message of ``task_id``; returns how many.

    0 means nothing was pending: the task was already moved to its queue (it is then
    Celery's to revoke), or it was never delayed.
    """
    with open_store(app) as store:
        return store.cancel(task_id)


def reschedule(
    app: Celery,
    task_id: str,
    *,
    eta: datetime | None = None,
    countdown: float | None = None,
) -> int:
    """Move every pending delayed message of ``task_id`` to a new ETA; returns how many.

    Give exactly one of ``eta`` (a naive value is read in ``app.timezone``'s sense,
    as Celery does) or ``countdown`` (seconds from now). The message's own ``eta``
    header is rewritten too, so a worker never waits for the old time. A past time
    delivers at the next move.
    """
    if (eta is None) == (countdown is None):
        raise TypeError("reschedule() needs exactly one of eta= or countdown=")
    if countdown is not None:
        eta = datetime.now(timezone.utc) + timedelta(seconds=countdown)
    assert eta is not None
    aware = maybe_make_aware(eta, app.timezone)
    with open_store(app) as store:
        return store.reschedule(
            task_id, due_ms(aware.timestamp()), lambda payload: with_eta(payload, aware)
        )


def backlog(app: Celery) -> list[QueueBacklog]:
    """Per queue: pending delayed messages, how many are overdue, next due time."""
    with open_store(app) as store:
        return store.backlog()
