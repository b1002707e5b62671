"""Delay keys: at most one pending message per key and queue (debounce, dedup, refuse).

A keyed message names a delay key. While a message with the same key is pending in the
store, a new one, in one atomic script (``lua/schedule_keyed.lua``):

- ``replace``: takes the pending message's place; the due time restarts from the new
  message's, but never later than ``max_wait`` after the first pending message of the
  key was scheduled (debounce);
- ``keep``: is dropped; the pending message stays (dedup, throttle);
- ``reject``: is refused; nothing changes.

The key is held from the schedule until the message leaves the schedule: moved, claimed
by a mover handing it to another broker, cancelled, purged. It is indexed in the
queue's duplicates hash (record.key_index_field), and carried in the message's record
so that every way out releases it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .record import task_id_of

#: What a keyed message does when its key is held, as schedule_keyed.lua takes it.
ON_HELD = ("replace", "keep", "reject")
#: schedule_keyed.lua's outcome codes, in order.
OUTCOMES = ("scheduled", "replaced", "kept", "rejected")


@dataclass(frozen=True)
class DelayKey:
    """A message's delay key and what it does when a pending message holds the key."""

    name: str
    on_held: str = "replace"
    max_wait_ms: int = 0  # 0: a replace may push the due time out without limit

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a delay key must be a non-empty string, got {self.name!r}")
        if self.on_held not in ON_HELD:
            raise ValueError(f"on a held delay key: one of {ON_HELD}, got {self.on_held!r}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait must not be negative, got {self.max_wait_ms} ms")

    @property
    def encoded(self) -> bytes:
        return self.name.encode("utf-8", "surrogatepass")


@dataclass(frozen=True)
class KeyedOutcome:
    """What became of a keyed message."""

    outcome: str  # one of OUTCOMES
    #: The task id that holds the key now: the new message's (scheduled, replaced) or
    #: the pending one's (kept, rejected).
    task_id: str
    due_ms: int  # when that message is due
    replaced_id: str | None = None  # replaced: the task id of the message it replaced

    @classmethod
    def from_reply(cls, reply: Sequence[Any], new_task_id: str) -> KeyedOutcome:
        """Read schedule_keyed.lua's reply for the message of ``new_task_id``."""
        code, key, due = int(reply[0]), bytes(reply[1]), int(reply[2])
        outcome = OUTCOMES[code]
        if outcome in ("kept", "rejected") and task_id_of(key) == new_task_id:
            # the key is held by this very task: its publish was retried after a store
            # reply was lost, or the caller sent its task id twice; it is pending
            return cls("scheduled", new_task_id, due)
        if outcome == "scheduled":
            return cls(outcome, new_task_id, due)
        if outcome == "replaced":
            return cls(outcome, new_task_id, due, replaced_id=task_id_of(key))
        return cls(outcome, task_id_of(key), due)
