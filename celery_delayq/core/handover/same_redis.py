"""The hand-over when the queues live in the store's own Redis: one script call moves a
batch of due messages into their kombu lists, atomically (move_due.lua)."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from ..batching import call_time
from ..layout.keys import QueueKeys
from ..layout.queue_counters import LATENESS_BUCKETS_MS
from ..lua import StoreScripts
from ..results import MoveResult
from . import MOVE_BATCH_BYTES, log_unreadable

#: A dense instant is moved this long ahead per message in it (us) when that exceeds the
#: move-ahead: about what a busy solo worker takes to fetch and hold one ETA message, so
#: two or more workers have fetched the instant by its ETA (move_due.lua).
BURST_FETCH_US = 2000
#: Messages due within this long (ms) of the earliest count as one instant.
BURST_INSTANT_MS = 100


class SameRedisMove:
    """Due messages go into their kombu lists in the store's own Redis, in the very
    script call that takes them out of the store (``lua/move_due.lua``): exactly once,
    whatever the number of movers, without a lock.

    ``queue_lists`` names a queue's kombu lists (its own and its priority sub-lists, as
    real keys): their expiry is refreshed when a moved message carries the queue's
    ``x-expires``, as kombu's publish refreshes it. Without it, only the queue's own list.

    ``ahead_ms``: messages are moved this long before they are due (a Celery worker holds
    a message until its ``eta`` header), so that the fetch and the worker's handling of
    the message happen before the ETA, not after it. The MoveResult's ``now_ms`` is then
    the Redis time plus ``ahead_ms``: the time by which messages were judged due.

    ``burst_ahead_ms``: an instant of many messages due together is moved further ahead,
    ``BURST_FETCH_US`` per message, up to this much beyond ``ahead_ms``: vanilla's workers
    hold such an instant in memory before it is due, and fetching it only at the instant
    would make the last of it late. Still no task starts early: the worker's timer starts
    each at its ETA. With ``ahead_ms`` 0 (consumers that do not wait for the ETA) it is off.

    ``release_log``: how many flow-control releases each queue shard's log keeps
    (``delayq_release_log``; lua/gates.lua).
    """

    def __init__(
        self,
        client: redis.Redis,
        scripts: StoreScripts | None = None,
        queue_lists: Callable[[str], list[str]] | None = None,
        ahead_ms: int = 0,
        burst_ahead_ms: int = 0,
        release_log: int = 0,
    ) -> None:
        self.scripts = scripts or StoreScripts.register(client)
        self.queue_lists = queue_lists
        self.ahead_ms = ahead_ms
        self.burst_ahead_ms = burst_ahead_ms
        self.release_log = release_log

    def close(self) -> None:
        """Nothing to release: the move runs on the store's own connection."""

    def settle_pipelined(self) -> list[MoveResult]:
        """Nothing is ever ahead: a move is done when its script returns."""
        return []

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        lists = self.queue_lists(queue.queue) if self.queue_lists else [queue.own_list]
        started = time.perf_counter()
        reply = self.scripts.move_due(
            keys=queue.move_keys(),
            args=[
                *queue.page_args(),
                limit,
                MOVE_BATCH_BYTES,
                queue.own_list,
                self.ahead_ms,
                self.burst_ahead_ms,
                BURST_FETCH_US,
                BURST_INSTANT_MS,
                self.release_log,
                len(lists),
                *lists,
                *LATENESS_BUCKETS_MS,
            ],
        )
        seconds = time.perf_counter() - started
        moved, next_due, now, missing, max_late, further = reply[:6]
        next_due_ms = None if next_due < 0 else int(next_due)
        log_unreadable(queue, int(missing))
        # a paused queue's reply ends before the batch used and the time worked
        used, worked = (int(reply[6]), int(reply[7])) if len(reply) > 7 else (None, 0)
        return MoveResult(
            int(moved),
            next_due_ms,
            int(now),
            int(missing),
            int(max_late),
            call_time(worked, seconds),
            int(further),
            used,
        )
