"""Keyed scheduling for Celery tasks: ``schedule_keyed`` and ``debounce`` set a
message's delay-key headers (brokers/common/key_headers.py) and report what the store
did with it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from celery import Task
from celery.result import AsyncResult

from ..brokers.common.key_headers import KEY_HEADER, MAX_WAIT_HEADER, ON_HELD_HEADER, listening
from ..core.layout.delay_keys import DelayKey, KeyedOutcome


class KeyedResult(AsyncResult):
    """The result of a keyed message: the task that holds the key now.

    ``outcome`` is "scheduled" (the key was free), "replaced" (this message took the
    place of ``replaced_id``, whose result will never come) or "kept" (this message was
    dropped: the id is the pending task's, the one that runs).
    """

    def __init__(self, outcome: KeyedOutcome, **kwargs: Any) -> None:
        super().__init__(outcome.task_id, **kwargs)
        self.outcome = outcome.outcome
        self.replaced_id = outcome.replaced_id
        self.due = outcome.due_ms / 1000.0

    @property
    def dropped(self) -> bool:
        return self.outcome == "kept"


def schedule_keyed(
    task: Task,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    *,
    key: str,
    on_held: str = "replace",
    max_wait: float | None = None,
    **options: Any,
) -> KeyedResult:
    """``task.apply_async(args, kwargs, **options)`` with a delay key (see the module).

    Needs a ``countdown`` or ``eta``: the key lives while the message waits in the
    store. Raises ``DelayKeyHeld`` for ``on_held="reject"`` when the key is held.
    """
    countdown = options.pop("countdown", None)
    if countdown is not None:  # as Celery's send_task, but countdown=0 too gets an eta
        options["eta"] = task.app.now() + timedelta(seconds=countdown)
    if options.get("eta") is None:
        raise ValueError("a keyed message needs a countdown or an eta")
    DelayKey(key, on_held, 0 if max_wait is None else round(max_wait * 1000))  # validates
    headers = {**(options.pop("headers", None) or {}), KEY_HEADER: key, ON_HELD_HEADER: on_held}
    if max_wait is not None:
        headers[MAX_WAIT_HEADER] = max_wait
    with listening() as outcomes:
        sent = task.apply_async(args, kwargs, headers=headers, **options)
    if not outcomes:
        raise RuntimeError(
            f"{task.name} was sent without passing through celery-delayq's store: is "
            "its app's broker_transport celery-delayq's?"
        )
    return KeyedResult(outcomes[-1], backend=sent.backend, app=sent.app)


def debounce(
    task: Task,
    args: Sequence[Any] | None = None,
    kwargs: dict[str, Any] | None = None,
    *,
    key: str,
    countdown: float,
    max_wait: float | None = None,
    **options: Any,
) -> KeyedResult:
    """Run ``task`` ``countdown`` seconds after the last call with this key, but no
    later than ``max_wait`` seconds after the first one of them (if given)."""
    return schedule_keyed(
        task, args, kwargs, key=key, max_wait=max_wait, countdown=countdown, **options
    )
