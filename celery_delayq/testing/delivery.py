"""Sending tasks and counting deliveries.

- ``publish``: send a task as a given app (made current first, as the transport needs).
- ``kombu_lists``: the Redis lists kombu keeps a queue's messages in.
- ``schedule_numbered`` and ``delivered_numbers``: fill a store with numbered messages
  in pipelined round trips, and read back which were delivered (to check each once).
- ``eta_seconds``: a running task's ETA, to measure how late it started.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import redis
from celery import Celery
from celery.result import AsyncResult

from ..core.store import DelayedStore, Scheduled

#: kombu's Redis transport keeps a queue's messages of priority step ``s`` in the list
#: ``<queue><PRIORITY_SEP><s>`` (step 0: the queue's own name); these are its defaults
#: (transport options ``sep`` and ``priority_steps``).
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


def kombu_lists(
    queue: str,
    global_keyprefix: str = "",
    priority_steps: Iterable[int] = PRIORITY_STEPS,
    sep: str = PRIORITY_SEP,
) -> list[str]:
    """Every list kombu's Redis transport may push a message of ``queue`` to (one per
    priority step), ``global_keyprefix`` included."""
    return [
        f"{global_keyprefix}{queue}{sep}{step}" if step else f"{global_keyprefix}{queue}"
        for step in priority_steps
    ]


def schedule_numbered(
    store: DelayedStore, queue: str, count: int, due_ms: int, *, first: int = 0
) -> None:
    """Schedule messages number ``first`` to ``first + count - 1`` of ``queue``, all due
    at ``due_ms`` (Redis clock), each with its number as payload and the queue's own list
    as destination, pipelined through ``DelayedStore.schedule_many``. See
    ``delivered_numbers``."""
    store.schedule_many(
        Scheduled(queue, f"m{i}", None, due_ms, queue, b"%d" % i)
        for i in range(first, first + count)
    )


def delivered_numbers(client: redis.Redis, list_key: str, chunk: int = 100_000) -> list[int]:
    """The numbers of the ``schedule_numbered`` messages in ``list_key``, sorted, with
    repeats (a message delivered twice is there twice); read in chunks."""
    numbers: list[int] = []
    length = int(client.llen(list_key))
    for start in range(0, length, chunk):
        raw: Any = client.lrange(list_key, start, start + chunk - 1)
        numbers.extend(int(item) for item in raw)
    return sorted(numbers)


def publish(
    app: Celery, task_name: str, *args: Any, own_connection: bool = False, **options: Any
) -> AsyncResult:
    """``app.send_task(task_name, args, **options)``, with ``app`` made Celery's current
    app first: the transport's channel takes its delayq settings from the current app,
    so a process with several apps must make the publishing one current.

    With ``own_connection``, the message goes over a new connection rather than a pooled
    producer (kombu keys its pools by broker URL and transport options only, so two apps
    that differ only in delayq settings would share a channel).
    """
    app.set_current()
    if not own_connection:
        return app.send_task(task_name, args, **options)
    with app.connection_for_write() as connection:
        return app.send_task(task_name, args, connection=connection, **options)


def eta_seconds(eta: Any) -> float | None:
    """A task's ``request.eta`` (ISO 8601 string or datetime) as epoch seconds."""
    if not eta:
        return None
    moment = eta if isinstance(eta, datetime) else datetime.fromisoformat(str(eta))
    return moment.timestamp()
