"""What a worker needs of a message its broker delivered, to move it to the dead letters
instead of handing it to Celery (worker/poison.py): each broker's channel tells where
the message came from and how often it has been delivered.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ...core.record import Record, message_key
from ...core.store import DelayedStore


@dataclass(frozen=True)
class Delivered:
    """A delivered message, as its dead letter keeps it."""

    queue: str  # the queue it was taken from: its dead letters are filed under it
    destination: str  # where ``celery delayq dead resend`` sends it: back to that queue
    payload: bytes  # its kombu envelope, as the store keeps messages


def file_dead_letter(store: DelayedStore, delivered: Delivered, reason: str) -> None:
    """Keep ``delivered`` as a dead letter of its queue, with the reason. Its key is new
    (not its task id, which a crafted message may share with another dead letter)."""
    key = message_key(None, f"unreadable:{uuid.uuid4().hex}")
    record = Record(0, delivered.destination, delivered.payload)
    store.dead.add(delivered.queue, key, record, reason)


def count_of(value: object) -> int:
    """A delivery count read from a header or attribute; 0 (unknown) when it is not a
    whole number (a hostile value counts as nothing)."""
    if isinstance(value, bool):
        return 0
    try:
        count = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(count, 0)
