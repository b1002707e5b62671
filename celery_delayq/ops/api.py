"""Public operations on the pending delayed tasks of a Celery app.

Unlike Celery's ``revoke``, which only reaches the memory of live workers, these act
on the store in Redis, so their effect is permanent.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

from celery import Celery
from celery.utils.time import maybe_make_aware

from ..brokers.common.message import due_ms, with_eta
from ..brokers.connect import open_store
from ..config.settings import config_of
from ..core.health.store_status import StoreStatus, read_status
from ..core.results import DeadLetter, QueueBacklog
from ..core.store import DelayedStore


def cancel(app: Celery, task_id: str) -> int:
    """Remove every pending delayed message of ``task_id``; returns how many.

    0 means nothing was pending: the task was already moved to its queue (it is then
    Celery's to revoke), or it was never delayed.
    """
    with open_store(app) as store:
        return store.cancel(task_id)


def cancel_many(app: Celery, task_ids: Iterable[str]) -> dict[str, int]:
    """``cancel`` for many task ids on one store connection; per task id, how many."""
    with open_store(app) as store:
        return {task_id: store.cancel(task_id) for task_id in task_ids}


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
    if eta is None:
        eta = datetime.now(timezone.utc) + timedelta(seconds=countdown or 0)
    with open_store(app) as store:
        return _reschedule(store, task_id, maybe_make_aware(eta, app.timezone))


def reschedule_many(app: Celery, task_ids: Iterable[str], eta: datetime) -> dict[str, int]:
    """``reschedule`` to one ``eta`` for many task ids; per task id, how many."""
    eta = maybe_make_aware(eta, app.timezone)
    with open_store(app) as store:
        return {task_id: _reschedule(store, task_id, eta) for task_id in task_ids}


def _reschedule(store: DelayedStore, task_id: str, eta: datetime) -> int:
    return store.reschedule(task_id, due_ms(eta.timestamp()), lambda raw: with_eta(raw, eta))


def promote(app: Celery, task_ids: Iterable[str]) -> dict[str, int]:
    """Deliver these pending tasks now: their ETA becomes now by the Redis clock (which
    the movers go by), then everything due is moved. Per task id, how many messages."""
    with open_store(app) as store:
        now = datetime.fromtimestamp(store.server_time_ms() / 1000, timezone.utc)
        promoted = {task_id: _reschedule(store, task_id, now) for task_id in task_ids}
        store.move_all_due()
    return promoted


def deliver_all_due(app: Celery) -> int:
    """Move every overdue message now (what a mover would do); how many were moved."""
    with open_store(app) as store:
        return store.move_all_due().moved


def purge(app: Celery, queues: Iterable[str] | None = None) -> dict[str, int]:
    """Delete the pending delayed messages of ``queues`` (default: every queue); how
    many per queue. The queues' lists are left alone (``celery purge`` empties both), and
    so are the periodic occurrences written ahead: the entries go on running."""
    with open_store(app) as store:
        names = list(queues) if queues is not None else store.queues()
        return {queue: store.purge(queue) for queue in names}


def backlog(app: Celery) -> list[QueueBacklog]:
    """Per queue: pending delayed messages, how many are overdue, next due time."""
    with open_store(app) as store:
        return store.backlog()


def status(app: Celery) -> StoreStatus:
    """Backlog per queue and the movers, alive or not, in one snapshot."""
    with open_store(app) as store:
        return read_status(store, config_of(app).mover_alive_within)


def dead_letters(app: Celery, queue: str | None = None) -> list[DeadLetter]:
    """Messages that kept failing to reach the broker (unroutable, refused, or whose
    claims kept expiring), oldest first, each with its reason."""
    with open_store(app) as store:
        return store.dead_letters(queue)


def resend_dead(app: Celery, task_ids: Iterable[str] | None = None) -> int:
    """Schedule dead letters again, due now, and deliver what is due (every dead letter
    when ``task_ids`` is None); how many were scheduled again. Those the broker still
    refuses come back as dead letters after their tries."""
    with open_store(app) as store:
        resent = sum(
            store.resend_dead(queue, keys) for queue, keys in _dead_keys(store, task_ids).items()
        )
        if resent:
            store.move_all_due()
    return resent


def drop_dead(app: Celery, task_ids: Iterable[str] | None = None) -> int:
    """Delete dead letters for good (every one when ``task_ids`` is None); how many."""
    with open_store(app) as store:
        return sum(
            store.drop_dead(queue, keys) for queue, keys in _dead_keys(store, task_ids).items()
        )


def _dead_keys(store: DelayedStore, task_ids: Iterable[str] | None) -> dict[str, list[bytes]]:
    """The message keys of the wanted dead letters, per queue."""
    wanted = None if task_ids is None else set(task_ids)
    found: dict[str, list[bytes]] = {}
    for letter in store.dead_letters():
        if wanted is None or letter.task_id in wanted:
            found.setdefault(letter.queue, []).append(letter.key)
    return found
