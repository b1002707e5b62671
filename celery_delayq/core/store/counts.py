"""Counting what the store holds: backlog per queue, due-time windows, the counters of
each queue's stats hash; read in bounded calls however large the store grows."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..layout.keys import QueueKeys
from ..layout.queue_counters import counters
from ..lua import ScriptCall, run_pipelined
from ..redis_replies import hash_reply
from ..results import QueueBacklog
from .state import StoreState

#: Most pages one ``count.lua`` call reads (a few ms at most; see _shard_counts).
COUNT_PAGES = 500


class Counts:
    """Counts of pending, overdue, in-flight and dead messages, per queue."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def backlog(self) -> list[QueueBacklog]:
        """Pending, overdue and next due time per queue (queues with nothing pending too)."""
        queues = self.state.queues()
        now_ms = self.state.server_time_ms()
        counts = self._counts(queues, ["-inf", now_ms + 1, "+inf"])
        pending = self.pending_counts(queues)
        handover = self.handover_counts(queues)
        now = now_ms / 1000.0
        backlogs = []
        for queue, (next_due, overdue, later) in zip(queues, counts):
            in_flight, dead = handover[queue]
            # the rest of pending is out of the schedule and not claimed: in its bucket
            waiting = max(0, pending[queue] - overdue - later - in_flight)
            backlogs.append(
                QueueBacklog(
                    queue,
                    pending[queue],
                    overdue,
                    _seconds(next_due),
                    now,
                    in_flight,
                    dead,
                    waiting,
                )
            )
        return backlogs

    def handover_counts(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        """Per queue: messages in flight to another broker, and dead letters."""
        shards = self.state.all_shards(queues)
        with self.state.client.pipeline(transaction=False) as pipe:
            for keys in shards:
                pipe.zcard(keys.inflight)
                pipe.hlen(keys.dead)
            replies = iter(pipe.execute())
        counts = {queue: (0, 0) for queue in queues}
        for keys in shards:
            in_flight, dead = counts[keys.queue]
            counts[keys.queue] = (in_flight + int(next(replies)), dead + int(next(replies)))
        return counts

    def pending_counts(self, queues: Sequence[str]) -> dict[str, int]:
        """How many messages each of these queues has pending."""
        shards = self.state.all_shards(queues)
        with self.state.client.pipeline(transaction=False) as pipe:
            for keys in shards:
                pipe.hlen(keys.messages)
            counts = dict.fromkeys(queues, 0)
            for keys, count in zip(shards, pipe.execute()):
                counts[keys.queue] += int(count)
            return counts

    def stats(self, queue: str) -> dict[str, int]:
        """The counters of one queue (see ``keys``), summed over its shards: scheduled,
        moved, cancelled, lateness."""
        total: dict[str, int] = {}
        for keys in self.state.keys.shards_of(queue):
            raw = hash_reply(self.state.client.hgetall(keys.stats))
            for name, value in counters(raw).items():
                total[name] = total.get(name, 0) + value
        return total

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        """Per queue, how many messages fall due in each window between ``edges``
        (epoch seconds, ascending): counts for [edges[0], edges[1]), ... ."""
        queues = self.state.queues()
        edges_ms = [_edge_ms(edge) for edge in edges]
        counts = self._counts(queues, edges_ms)
        return {queue: reply[1:] for queue, reply in zip(queues, counts)}

    def _counts(self, queues: list[str], edges_ms: list[Any]) -> list[list[int]]:
        """Per queue: next due ms (-1 if none), then counts in [edges[i], edges[i + 1])."""
        totals: dict[str, list[int]] = {}
        for keys, counts in self._shard_counts(self.state.all_shards(queues), edges_ms):
            total = totals.setdefault(keys.queue, counts)
            if total is not counts:
                dues = [due for due in (total[0], counts[0]) if due >= 0]
                total[0] = min(dues) if dues else -1
                total[1:] = [a + b for a, b in zip(total[1:], counts[1:])]
        return [totals[queue] for queue in queues]

    def _shard_counts(
        self, shards: list[QueueKeys], edges_ms: list[Any]
    ) -> list[tuple[QueueKeys, list[int]]]:
        """``count.lua``'s reply per shard, each read in calls of at most COUNT_PAGES pages
        (pipelined over the shards), so that no call's work grows with the store."""
        counts: dict[int, list[int]] = {}
        cursors: dict[int, Any] = dict.fromkeys(range(len(shards)), "-inf")
        while cursors:
            calls: list[ScriptCall] = [
                (
                    self.state.scripts.count,
                    shards[i].as_list(),
                    [*shards[i].page_args(), cursor, COUNT_PAGES, *edges_ms],
                )
                for i, cursor in cursors.items()
            ]
            replies = run_pipelined(self.state.client, calls)
            for i, (next_due, last, *part) in zip(list(cursors), replies):
                total = counts.setdefault(i, [int(next_due), *(0 for _ in part)])
                total[1:] = [a + int(b) for a, b in zip(total[1:], part)]
                cursors[i] = b"(" + last
                if not last:
                    del cursors[i]
        return [(shards[i], counts[i]) for i in range(len(shards))]


def _seconds(due_ms: int) -> float | None:
    return None if due_ms < 0 else due_ms / 1000.0


def _edge_ms(edge: float) -> Any:
    if math.isfinite(edge):
        return round(edge * 1000)
    return "+inf" if edge > 0 else "-inf"
