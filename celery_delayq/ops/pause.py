"""Pause, resume and throttle flow control's releases, across every worker at once.

A flow-controlled task's messages wait in the store until their bucket may release them
(core/layout/gates.py). A hold on a bucket stops its releases: ``pause`` until
``resume``, ``throttle`` for some seconds. It is kept with the bucket's state in Redis
(core/lua/gate_hold.lua), so every mover obeys it from its next pass, and it holds for a
message sent after it too. A task's own bucket and each of its limit keys' buckets are
held apart: ``key`` names one limit key (the ``delayq_limit_key`` header a message was
sent with).

A hold stops releases, not runs: a message released before it still runs. Only messages
that wait in the store are held, so only tasks with a rate or concurrency limit.
"""

from __future__ import annotations

import math
from typing import Any

from celery import Celery, current_task

from ..brokers.connect import open_store
from ..config.limits import LIMIT_KEY_HEADER, read_limit_key
from ..core.layout.gates import KEY_SEPARATOR, bucket_of
from ..core.store import DelayedStore
from ..core.store.holds import BucketHold

#: The longest throttle, in seconds (30 days); hold longer with ``pause``.
MOST_THROTTLE_SECONDS = 30 * 86400


def pause(app: Celery, task: str, key: str | None = None) -> BucketHold:
    """Release none of ``task``'s messages (of limit key ``key``, if given) until
    ``resume``: they wait in the store, however long, on every worker."""
    return _hold(app, task, key, "pause")


def resume(app: Celery, task: str, key: str | None = None) -> BucketHold:
    """End a pause or a throttle of ``task`` (of limit key ``key``, if given): its
    waiting messages are released again, within its limits, from the movers' next pass."""
    return _hold(app, task, key, "resume")


def throttle(app: Celery, task: str, seconds: float, key: str | None = None) -> BucketHold:
    """Release none of ``task``'s messages (of limit key ``key``, if given) for
    ``seconds``, on every worker; then they go again within its limits. It never
    shortens a longer throttle or a pause that holds already."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"a throttle lasts a number of seconds, not {seconds!r}")
    if not 0 <= seconds <= MOST_THROTTLE_SECONDS:  # NaN too
        raise ValueError(
            f"a throttle lasts 0 to {MOST_THROTTLE_SECONDS} seconds, not {seconds!r}; "
            "for longer, pause"
        )
    return _hold(app, task, key, "throttle", math.ceil(seconds * 1_000_000))


def throttle_current(seconds: float) -> BucketHold:
    """``throttle`` the running task's own bucket (its limit key's, when it was sent with
    one) for ``seconds``, from inside the task: say, on an HTTP 429 with
    ``Retry-After: 30``, ``throttle_current(30)``, then retry as usual. Its other keys'
    releases go on."""
    task: Any = current_task
    if not task or task.request.called_directly:
        raise RuntimeError("throttle_current() is called from inside a running task")
    request = task.request
    key = request.get(LIMIT_KEY_HEADER)
    if key is None:
        key = (request.headers or {}).get(LIMIT_KEY_HEADER)
    return throttle(task.app, task.name, seconds, key)


def pause_queue(app: Celery, queue: str) -> None:
    """Release nothing from the store to ``queue`` until ``resume_queue``: delayed
    messages and every flow-controlled task's messages wait, on every worker (the moves
    of core/lua/move_due.lua and the hand-overs of core/lua/claim_due.lua look for it).
    Messages sent without a countdown or ETA to tasks without limits are never kept in
    the store, so they still go straight to the broker."""
    with open_store(app) as store:
        store.pause_queue(queue)


def resume_queue(app: Celery, queue: str) -> bool:
    """End ``pause_queue``: the movers are woken and release what is due, within each
    task's limits. Whether the queue was paused."""
    with open_store(app) as store:
        return store.resume_queue(queue)


def _hold(app: Celery, task: str, key: object, action: str, micros: int = 0) -> BucketHold:
    if not isinstance(task, str) or not task or KEY_SEPARATOR in task:
        raise ValueError(f"not a task name: {task!r}")
    bucket = bucket_of(task, None if key is None else read_limit_key(key))
    with open_store(app) as store:
        return store.hold_bucket(_queues_of(app, store, task), bucket, action, micros)


def _queues_of(app: Celery, store: DelayedStore, task: str) -> list[str]:
    """Where the task's bucket may be: every queue with delayed messages (a message may
    be routed anywhere), and its default route's queue, so a hold set before its first
    message holds that message."""
    route = app.amqp.router.route({}, task).get("queue")
    own = getattr(route, "name", route) or app.conf.task_default_queue
    return [*store.queues(), str(own)]
