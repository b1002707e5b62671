"""Move batches sized by time: one move call keeps Redis busy for at most a budget.

A fixed count does not bound time: the same 500 messages took 3 ms on one machine and
Redis version and 18 ms on another, and every other client of that Redis waits that
long. So the batch size is steered by how long the calls take.

The measure is how long the one script call whose work grows with the batch
(``move_due.lua``, or ``claim_due.lua`` for a broker elsewhere) kept Redis busy, as the
script itself reads it (``worked_us`` in lua/helpers.lua: Redis's CPU time where scripts
have ``os.clock``, Redis 7.2 on and Valkey; the server's clock on Redis 6.2 and 7.0,
where ``TIME`` runs on within a script). The client's wall time around the call is the
fallback, for a server that measures nothing: it adds a round trip and every wait of the
mover's thread (a worker's task holding the interpreter lock, a CPU), which on a busy
worker are most of it and would keep the batches at their least (``call_time``).

The controller is proportional with bounds: a call that moved a full batch, or took
longer than the budget, tells the time per message; the next batch is the size that
would take ``AIM`` of the budget at the least time per message of the last ``WINDOW``
such calls, changed by at most a factor ``STEP`` per call. The least, because on a busy
machine a call is only ever slowed (Redis or the mover waiting for a CPU), never sped
up, and a smaller batch would not shorten such a wait: it would only cost rate. A call
that moved less than its limit within the budget says nothing about bigger batches and
leaves the size alone. Aiming at 0.4 of the budget leaves room for the spread between
calls: the least time per message is the optimistic one, and calls of one size spread by
up to twice that on a 2-core VM (timed by the client, at ``AIM`` 0.8, 8 to 19% of the calls
of a 100,000-message burst went over the 2 ms budget, the longest 4.4 ms; at 0.5, none did,
the longest 1.6 ms: ``python -m benchmarks --scenario burst``, 2026-11-26, Redis 7.0.15 and
6.2.14). Timed by the script, a call's measure lost the round trip and the client's own
work, about a fifth of it in that burst, so the aim went from 0.5 to 0.4 with it (at 0.5,
23% of such a burst's calls went over 2 ms on a noisy VM where 2.4% had before).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable

#: Fewest messages a move call is asked for, however slow the calls.
LEAST = 10
#: The size before any call was timed: small, so the first call is short everywhere.
FIRST = 64
#: Most the size changes by in one step (a factor, either way).
STEP = 2.0
#: The share of the budget the calls aim at (the rest is room for their spread).
AIM = 0.4
#: How many of the latest informative calls the time per message is the least of.
WINDOW = 8


def call_time(worked_us: int, client_seconds: float) -> float:
    """The seconds a move call counts as against its budget: Redis's time as the script
    measured it, or, when it measured nothing (0), the client's wall time."""
    return worked_us / 1e6 if worked_us > 0 else client_seconds


class BatchSizer:
    """The batch size for the next move call, from the timing of the calls before it.

    ``most`` is ``delayq_move_batch_size``; ``budget`` (seconds) is
    ``delayq_move_call_budget``, and 0 turns sizing off (every batch is ``most``).
    """

    def __init__(self, most: int, budget: float) -> None:
        self.most = most
        self.budget = budget
        self.size = most if budget <= 0 else min(most, FIRST)
        #: Longest call observed (seconds) and calls observed, for stats and tests.
        self.longest = 0.0
        self.calls = 0
        self._per_message: deque[float] = deque(maxlen=WINDOW)

    def observe(self, limit: int, taken: int, seconds: float) -> None:
        """Learn from one call that was asked for ``limit`` messages, took ``taken`` of
        them (moved or dropped as unreadable) and lasted ``seconds``."""
        self.calls += 1
        self.longest = max(self.longest, seconds)
        if self.budget <= 0 or taken <= 0 or seconds <= 0:
            return
        if taken < limit and seconds <= self.budget:
            return  # not a full batch and quick: no evidence about bigger ones
        self._per_message.append(seconds / taken)
        wanted = self.budget * AIM / min(self._per_message)
        bounded = min(limit * STEP, max(limit / STEP, wanted))
        self.size = min(self.most, max(LEAST, round(bounded)))


class ShardBatches:
    """One ``BatchSizer`` per queue shard: a shard whose messages cost more per message
    (large payloads, a dense instant) gets smaller batches without shrinking another's,
    so in a pass, where the shards take turns a batch each, one queue's shape cannot slow
    another's delivery."""

    def __init__(self, most: int, budget: float) -> None:
        self.most = most
        self.budget = budget
        self._sizers: dict[Hashable, BatchSizer] = {}

    def of(self, shard: Hashable) -> BatchSizer:
        """The sizer of one queue shard (a new one starts small, see ``FIRST``)."""
        sizer = self._sizers.get(shard)
        if sizer is None:
            sizer = self._sizers[shard] = BatchSizer(self.most, self.budget)
        return sizer

    @property
    def size(self) -> int:
        """The smallest batch any shard is at (a new shard's before any move): for reports."""
        first = self.most if self.budget <= 0 else min(self.most, FIRST)
        return min((sizer.size for sizer in self._sizers.values()), default=first)
