"""Keyed scheduling for Celery tasks: debounce, dedup and refuse by a delay key.

A delayed message is keyed by three message headers, which any ``apply_async`` (or
signature) can set::

    reindex.apply_async((42,), countdown=30, headers={
        "delayq_key": "user:42",        # one pending message per key and queue
        "delayq_on_held": "replace",    # or "keep", "reject" (core/keyed.py)
        "delayq_max_wait": 300,         # seconds; replace only
    })

``schedule_keyed`` and ``debounce`` set them and report what happened. The channel reads
them when it stores the message (``delay_key_of``); a retry (``retries`` > 0) is stored
without its key, so a task retrying itself never collides with, replaces or is dropped
for a newer message of its own key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta
from typing import Any

from celery import Task
from celery.result import AsyncResult

from ..core.delay_keys import DelayKey, KeyedOutcome

KEY_HEADER = "delayq_key"
ON_HELD_HEADER = "delayq_on_held"
MAX_WAIT_HEADER = "delayq_max_wait"

#: While a ``schedule_keyed`` call publishes, the channel reports its outcome here.
_outcomes: ContextVar[list[KeyedOutcome] | None] = ContextVar("delayq_outcomes", default=None)


class InvalidDelayKey(ValueError):
    """A message's delay-key headers cannot be used; raised before anything is stored."""


class DelayKeyHeld(Exception):
    """A keyed message with ``on_held="reject"`` met a pending message holding its key."""

    def __init__(self, key: str, outcome: KeyedOutcome) -> None:
        super().__init__(
            f"delay key {key!r} is held by pending task {outcome.task_id} "
            f"(due at {outcome.due_ms / 1000:.3f}); this message was not sent"
        )
        self.key = key
        self.pending_id = outcome.task_id


class KeyedResult(AsyncResult):  # type: ignore[misc]
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


def delay_key_of(message: dict[str, Any]) -> DelayKey | None:
    """The delay key a (protocol 2) message asks for; None when it has none, or is a
    retry."""
    headers = message.get("headers")
    if not isinstance(headers, dict) or headers.get(KEY_HEADER) is None:
        return None
    if headers.get("retries"):
        return None
    max_wait = headers.get(MAX_WAIT_HEADER)
    try:
        max_wait_ms = 0 if max_wait is None else round(float(max_wait) * 1000)
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidDelayKey(
            f"{MAX_WAIT_HEADER} must be a number of seconds, got {max_wait!r}"
        ) from exc
    try:
        on_held = headers.get(ON_HELD_HEADER) or "replace"
        return DelayKey(str(headers[KEY_HEADER]), on_held, max_wait_ms)
    except ValueError as exc:
        raise InvalidDelayKey(f"invalid delay key headers: {exc}") from exc


def report(key: DelayKey, outcome: KeyedOutcome) -> None:
    """Tell the waiting ``schedule_keyed`` (if any) what became of a keyed message;
    refuse a rejected one."""
    listening = _outcomes.get()
    if listening is not None:
        listening.append(outcome)
    if outcome.outcome == "rejected":
        raise DelayKeyHeld(key.name, outcome)


@contextmanager
def _listening() -> Iterator[list[KeyedOutcome]]:
    outcomes: list[KeyedOutcome] = []
    token = _outcomes.set(outcomes)
    try:
        yield outcomes
    finally:
        _outcomes.reset(token)


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
    with _listening() as outcomes:
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
