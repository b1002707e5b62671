"""The one seam through which due messages leave the store.

A ``HandOver`` delivers at most one bounded batch of a queue's due messages and says
what it did. Movers, ``promote`` and every other caller go through it, so a store whose
queues live elsewhere needs only another implementation here, not a branch in the
script path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import redis

from .keys import QueueKeys
from .results import MoveResult
from .scripts import StoreScripts
from .stats import LATENESS_BUCKETS_MS

#: A move stops after this many payload bytes, so one script call stays short (a few ms)
#: even when messages are large.
MOVE_BATCH_BYTES = 1 << 20


class HandOver(Protocol):
    """Delivers the due messages of one queue, at most ``limit`` of them per call."""

    def deliver_due(self, queue: QueueKeys, limit: int) -> MoveResult: ...


class SameRedisMove:
    """Due messages go into their kombu lists in the store's own Redis, in the very
    script call that takes them out of the store (``lua/move_due.lua``): exactly once,
    whatever the number of movers, without a lock.

    ``queue_lists`` names a queue's kombu lists (its own and its priority sub-lists, as
    real keys): their expiry is refreshed when a moved message carries the queue's
    ``x-expires``, as kombu's publish refreshes it. Without it, only the queue's own list.
    """

    def __init__(
        self,
        client: redis.Redis,
        scripts: StoreScripts | None = None,
        queue_lists: Callable[[str], list[str]] | None = None,
    ) -> None:
        self.scripts = scripts or StoreScripts.register(client)
        self.queue_lists = queue_lists

    def deliver_due(self, queue: QueueKeys, limit: int) -> MoveResult:
        lists = self.queue_lists(queue.queue) if self.queue_lists else [queue.own_list]
        moved, next_due, now, missing, max_late = self.scripts.move_due(
            keys=queue.as_list(),
            args=[
                *queue.page_args(),
                limit,
                MOVE_BATCH_BYTES,
                queue.own_list,
                len(lists),
                *lists,
                *LATENESS_BUCKETS_MS,
            ],
        )
        next_due_ms = None if next_due < 0 else int(next_due)
        return MoveResult(int(moved), next_due_ms, int(now), int(missing), int(max_late))
