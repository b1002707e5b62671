"""An occurrence's message: what the store keeps of one occurrence of a periodic entry.

One function, ``occurrence_messages``, builds them for every caller: the writer that
stores them under the entry's mark, the dry build that checks an entry before it is
stored (so the check and the write cannot differ), and ``run_now`` (through
``send_occurrence``). The message is Celery's own: its routing, its protocol-2 envelope
and the transport's envelope are made by ``send_task`` on the app's producer, and the
channel's diverter hands back what it would store (``Diverter.capture``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any
from weakref import WeakSet

from celery import Celery

from ..brokers.common.diverter import is_delayq_channel
from ..config.errors import ConfigurationError
from ..core.store import DelayedStore, Scheduled
from .entry import PeriodicEntry
from .records import ENTRY_HEADER, OCCURRENCE_HEADER, OVERLAP_HEADER

__all__ = ["occurrence_messages", "send_occurrence", "store_of", "task_known"]

logger = logging.getLogger(__name__)


def store_of(producer: Any) -> DelayedStore:
    """The store of ``producer``'s channel: the one handle a pass uses, for its marks,
    its entries and its writes."""
    channel = producer.channel
    if not is_delayq_channel(channel):
        raise ConfigurationError("periodic entries need celery-delayq's transport")
    store: DelayedStore = channel.diverter.store
    return store


def occurrence_messages(
    app: Celery, entry: PeriodicEntry, runs: Iterable[tuple[datetime, datetime]], producer: Any
) -> list[Scheduled]:
    """What the store keeps of each of ``runs`` (occurrence, due) of ``entry``: built by
    Celery on ``producer``'s channel and kept nowhere (the caller stores them, or not).
    A run that falls due while they are built (a long pass on a loaded machine) is
    returned too, never published: only the store's write under the entry's mark may
    send an occurrence, so two beats cannot both send it."""
    store_of(producer)  # refuses another transport before anything is sent
    with producer.channel.diverter.capture(due_too=True) as captured:
        for occurrence, due in runs:
            send_occurrence(app, entry, occurrence, eta=due, producer=producer)
    return captured


def send_occurrence(app: Celery, entry: PeriodicEntry, occurrence: datetime, **send: Any) -> Any:
    """``app.send_task`` for one occurrence of ``entry``: its task, arguments and options,
    the entry's headers with the occurrence's and the entry's name on top.

    An ``expires`` in seconds counts from the ``eta`` (when Celery's beat would send it):
    Celery counts it from the send, and an occurrence is sent when written ahead."""
    headers = {
        **dict(entry.options.get("headers") or {}),
        OCCURRENCE_HEADER: occurrence.isoformat(),
        ENTRY_HEADER: entry.name,
        **({OVERLAP_HEADER: "skip"} if entry.overlap == "skip" else {}),
    }
    options = {key: value for key, value in entry.options.items() if key != "headers"}
    expires, eta = options.get("expires"), send.get("eta")
    if isinstance(expires, (int, float)) and not isinstance(expires, bool) and eta is not None:
        options["expires"] = eta + timedelta(seconds=expires)
    return app.send_task(
        entry.task, args=entry.args, kwargs=dict(entry.kwargs), headers=headers, **options, **send
    )


#: The apps whose task modules ``task_known`` imported.
_IMPORTED: WeakSet[Celery] = WeakSet()


def task_known(app: Celery, task: str) -> bool:
    """Whether ``app`` has the task ``task``, once its task modules are imported as a
    worker imports them: Django's ``autodiscover_tasks`` (and ``imports``/``include``)
    wait for ``app.loader.import_default_modules``, which a shell or a CLI never runs."""
    if task in app.tasks:
        return True
    if app not in _IMPORTED:
        _IMPORTED.add(app)
        try:
            app.loader.import_default_modules()
        except Exception as exc:  # the workers will say it louder; the entry is kept
            logger.warning("the task modules of app %r do not import: %s", app.main, exc)
    return task in app.tasks
