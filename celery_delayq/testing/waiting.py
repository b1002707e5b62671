"""Waiting for an observed condition, never a fixed sleep.

- ``wait_until``: the one way to wait, for an observed condition.
- ``activity`` and ``wait_until_quiescent``: everything that could still make a task run
  (delayed, queued, unacknowledged or held by a worker), and a wait until nothing is left,
  so that "it ran exactly once" is asserted when no further run can happen.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from celery import Celery

from ..brokers.common.diverter import uses_delayq
from ..ops.api import backlog
from .delivery import kombu_lists

T = TypeVar("T")


class WaitAborted(RuntimeError):
    """``wait_until`` gave up early: what it waited for can no longer happen."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str | None = None,
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that.

    Raises ``TimeoutError`` (saying ``what`` was awaited) once ``timeout`` seconds have
    passed, and ``WaitAborted`` as soon as ``abort()`` returns a reason, such as "the
    process exited", so that a wait for something that can no longer happen fails at
    once instead of at its deadline. The condition is always evaluated at least once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        reason = abort() if abort is not None else None
        if reason:
            raise WaitAborted(f"gave up waiting until {what or 'the condition held'}: {reason}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:g}s waiting until {what or 'the condition held'}"
            )
        time.sleep(interval)


@dataclass(frozen=True)
class Activity:
    """Everything that could still make a task of an app run, at one moment."""

    #: Messages pending in the app's delayed store (0 for another transport).
    delayed: int
    #: Messages in kombu's lists of the queues looked at (every priority).
    queued: int
    #: Messages some consumer fetched and has not acknowledged (kombu's ``unacked``);
    #: kombu gives them back to their queue after ``visibility_timeout``.
    unacked: int
    #: Per worker node: tasks it is running, has reserved or holds for their ETA;
    #: None when not every expected worker answered.
    held: dict[str, int] | None

    @property
    def idle(self) -> bool:
        """Nothing is delayed, queued, unacknowledged or held by any worker."""
        if self.delayed or self.queued or self.unacked or self.held is None:
            return False
        return not any(self.held.values())


def activity(
    app: Celery, *, workers: int, queues: Iterable[str] | None = None, timeout: float = 1.0
) -> Activity:
    """What could still run for ``app``: its delayed store, the lists of ``queues``
    (default: ``task_default_queue``), kombu's ``unacked`` hash, and what each of the
    ``workers`` running workers reports through remote control (active, reserved,
    scheduled; each must answer within ``timeout``). Keys are read through the app's
    own broker connection, so ``global_keyprefix``, TLS and ACL users apply."""
    names = list(queues) if queues is not None else [app.conf.task_default_queue]
    delayed = sum(entry.pending for entry in backlog(app)) if uses_delayq(app) else 0
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        client = channel.client  # prefixes LLEN and HLEN keys with global_keyprefix
        lists = [
            name
            for queue in names
            for name in kombu_lists(queue, "", channel.priority_steps, channel.sep)
        ]
        queued = sum(int(client.llen(name)) for name in lists)
        unacked = int(client.hlen(channel.unacked_key))
    return Activity(delayed, queued, unacked, _held_by_workers(app, workers, timeout))


def _held_by_workers(app: Celery, workers: int, timeout: float) -> dict[str, int] | None:
    """Tasks each worker runs, has reserved or holds for an ETA; None unless all answer."""
    inspect = app.control.inspect(timeout=timeout, limit=workers)
    held: dict[str, int] = {}
    for ask in (inspect.active, inspect.reserved, inspect.scheduled):
        replies = ask() or {}
        if len(replies) < workers:
            return None
        for node, tasks in replies.items():
            held[node] = held.get(node, 0) + len(tasks or ())
    return held


def wait_until_quiescent(
    app: Celery,
    *,
    workers: int,
    queues: Iterable[str] | None = None,
    timeout: float = 60.0,
) -> Activity:
    """Wait until nothing can make a task of ``app`` run any more, and return that state.

    A task runs only from a message that is pending in the delayed store, waiting in a
    queue list, unacknowledged (kombu restores those), or held by a worker. Each is read
    in turn (``activity``); the wait ends when two readings in a row find nothing, so a
    message moving between places while one reading is taken (a mover moving it, a
    worker fetching it, a running task sending a retry) shows up in the next. After
    this, counting executions is final: a duplicate or a late run would have to come
    from a message that no longer exists anywhere.
    """
    names = list(queues) if queues is not None else None
    readings: list[Activity] = []

    def settled() -> bool:
        readings.append(activity(app, workers=workers, queues=names))
        return len(readings) >= 2 and readings[-1].idle and readings[-2].idle

    try:
        wait_until(settled, timeout=timeout, interval=0.05, what="nothing is left to run")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; last reading: {readings[-1]}") from None
    return readings[-1]
