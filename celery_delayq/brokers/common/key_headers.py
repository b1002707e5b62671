"""The delay key of a message: debounce, dedup and refuse by a key.

A delayed message is keyed by three message headers, which any ``apply_async`` (or
signature) can set::

    reindex.apply_async((42,), countdown=30, headers={
        "delayq_key": "user:42",        # one pending message per key and queue
        "delayq_on_held": "replace",    # or "keep", "reject" (core/layout/delay_keys.py)
        "delayq_max_wait": 300,         # seconds; replace only
    })

``schedule_keyed`` and ``debounce`` set them and report what happened. The channel reads
them when it stores the message (``delay_key_of``); a retry (``retries`` > 0) is stored
without its key, so a task retrying itself never collides with, replaces or is dropped
for a newer message of its own key.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...core.layout.delay_keys import DelayKey, KeyedOutcome

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


def delay_key_of(headers: Mapping[str, Any]) -> DelayKey | None:
    """The delay key a (protocol 2) message's headers ask for; None when it has none,
    or is a retry."""
    if headers.get(KEY_HEADER) is None:
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
    from ...core.layout.delay_keys import DelayKey  # a keyed message's publish only

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
def listening() -> Iterator[list[KeyedOutcome]]:
    outcomes: list[KeyedOutcome] = []
    token = _outcomes.set(outcomes)
    try:
        yield outcomes
    finally:
        _outcomes.reset(token)
