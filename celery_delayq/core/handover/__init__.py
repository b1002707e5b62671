"""The one seam through which due messages leave the store.

A ``HandOver`` delivers at most one bounded batch of a queue's due messages and says
what it did. Movers, ``promote`` and every other caller go through it, so a store whose
queues live elsewhere needs only another implementation here, not a branch in the
script path.
"""

from __future__ import annotations

import logging
from typing import Protocol

from ..layout.keys import QueueKeys
from ..results import MoveResult

logger = logging.getLogger(__name__)

#: A move stops after this many payload bytes (plus the last message, at most
#: ``delayq_max_message_size``), so one script call stays short however large the
#: messages: the time-sized batch (batching.py) is counted in messages and never goes below
#: ``batching.LEAST``. A script's cost grows faster than its bytes once it allocates fresh
#: memory: on a 2-core VM a call carrying 512 KiB of big messages took 0.7 ms (Redis 6.2)
#: and 3 to 18 ms (7.0), one carrying 1 MiB 5 ms (6.2) and 26 to 31 ms (7.0). 256 KiB
#: would cut a batch of 500 small tasks (about 870 bytes each) to 300 and the burst move
#: rate by 13 to 21% (benchmarks/RESULTS-pathological-shapes.md).
MOVE_BATCH_BYTES = 512 * 1024


class HandOver(Protocol):
    """Delivers the due messages of one queue, at most ``limit`` of them per call."""

    #: How long before their due time messages are delivered (MoveResult.now_ms is the
    #: Redis time plus this: the time messages are judged due by).
    ahead_ms: int
    #: The most a dense instant is delivered ahead beyond ``ahead_ms`` (0: never).
    burst_ahead_ms: int

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        """``more_calls``: the caller calls again for this queue while its result says
        more is due, then ``settle_pipelined`` (``move_all_due``), so a hand-over may send
        the next batch before this one is confirmed."""
        ...

    def settle_pipelined(self) -> list[MoveResult]:
        """Conclude every pipelined batch (their results)."""
        ...

    def close(self) -> None:
        """Release what delivering holds (a broker connection); the next delivery
        opens it again."""


def log_unreadable(queue: QueueKeys, missing: int) -> None:
    """Say that due entries had no readable record (the scripts dead-letter an unreadable
    record with its reason, and drop an entry without a record)."""
    if missing:
        logger.warning(
            "celery-delayq: %d due message(s) of queue %r had a missing or unreadable record:"
            " unreadable records are in the dead letters with the reason (`celery delayq"
            " dead`), entries without a record were dropped",
            missing,
            queue.label,
        )
