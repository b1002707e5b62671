"""Move batches sized by time: one move call keeps Redis busy for at most a budget.

A fixed count does not bound time: the same 500 messages took 3 ms on one machine and
Redis version and 18 ms on another, and every other client of that Redis waits that
long. So the batch size is steered by how long the calls take.

The measure is the client's wall time around the one script call whose work grows
with the batch (``move_due.lua``, or ``claim_due.lua`` for a broker elsewhere). It costs
nothing, and it is never less than Redis's own time. Timing inside the script cannot
replace it: ``TIME`` is frozen during a script on Valkey 8 and Redis 7.4, and Redis 7.0
has no ``os.clock`` in scripts.

The controller is proportional with bounds: a call that used its whole batch (short of it
by less than one flow-control release's weight, ``RELEASE_WEIGHT``), or took longer than
the budget, tells the time per message; the next batch is the size that would take ``AIM``
of the budget at the least time per message of the last ``WINDOW`` such calls, changed by
at most a factor ``STEP`` per call. The least, because on a busy machine a call is only
ever slowed (Redis or the mover waiting for a CPU), never sped up, and a smaller batch
would not shorten such a wait: it would only cost rate. A call that used less than its
batch within the budget says nothing about bigger batches and leaves the size alone.
Aiming at half the budget leaves room for the spread between calls: the least time per
message is the optimistic one, and calls of one size spread by up to twice that on a
2-core VM (at ``AIM`` 0.8, 8 to 19% of the calls of a 100,000-message burst went over the
2 ms budget, the longest 4.4 ms; at 0.5, none did, the longest 1.6 ms: ``python -m
benchmarks --scenario burst``, 2026-11-26, Redis 7.0.15 and 6.2.14).

The wall time also holds a part that does not grow with the batch: the round trip, and in
a solo worker the mover thread's waits for the interpreter lock and a CPU while a task runs
(up to the 5-ms switch interval, before the send and after the reply). In a flow-control
drain (2 solo workers releasing at a batch of 10, SLOWLOG at 0 beside a log of the movers'
calls, 2026-11-29, load average 4) Redis's own time was a median 384 µs a call and the
movers' wall time 2,736 µs (878 µs at the 10th percentile). Divided by 10, that part made
each message look so dear that the batch sat at ``LEAST`` the whole drain (16,277 calls for
50,000 releases), the more so as 3 releases use 9 of 10, which did not count as full.

So a call's fixed part is estimated, as where the line through the call and the quickest
of the last ``HISTORY`` calls that took at most half as many meets zero messages (none
such: no fixed part, as before; calls of the same size would make the work look free,
hence the half). Up to ``FIXED_CHARGED`` of the aim of it still counts, as Redis's own
setup of a call must fit the budget too: calls whose fixed part is a mere round trip (a
burst's, 0.1 to 0.4 ms) are sized exactly as before. The rest is taken to be waits outside
Redis and left out of the call's time per message, but never more than ``1 - AIM`` of the
call's time: the quickest smaller call may have waited longer than this one did, and then
the messages would look nearly free and the batch double for as long as the window
remembers it. With that bound the next batch is at most the size that, at this call's
whole time per message, takes the whole budget; Redis's part of a call is at most its
whole time and grows with the batch, so at that call's speed Redis's time of the next call
stays within the budget whatever the estimate, for any cost per message. Waits that keep
even the quickest of ``WINDOW`` calls over the budget still keep the batch at ``LEAST`` (in
the same drain at a load average of 8 on the 2 cores, 3 of 4 calls were at it, with a first
form of this estimate): then no call shows that Redis's part fits the budget.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable

#: Fewest messages a move call is asked for, however slow the calls.
LEAST = 10
#: The size before any call was timed: small, so the first call is short everywhere.
FIRST = 64
#: Most the size changes by in one step (a factor, either way).
STEP = 2.0
#: The share of the budget the calls aim at (the rest is room for their spread).
AIM = 0.5
#: How many of the latest informative calls the time per message is the least of.
WINDOW = 8
#: How many of the latest calls the fixed part of a call's time is the least of.
HISTORY = 128
#: The fixed part of a call, up to this share of the aim, is still charged to its messages:
#: Redis's own share of it (the script's setup, about 0.2 ms for a call of releases) must
#: fit the budget too; a longer one is taken to be waits outside Redis.
FIXED_CHARGED = 0.25
#: How much of a call's batch one flow-control release uses (``RELEASE_WEIGHT`` in
#: lua/gates.lua): a call of releases is full when short of its batch by less than this.
RELEASE_WEIGHT = 3


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
        self._history: deque[tuple[int, float]] = deque(maxlen=HISTORY)

    def observe(self, limit: int, taken: int, seconds: float) -> None:
        """Learn from one call that was asked for ``limit`` messages, took ``taken`` of
        them (moved or dropped as unreadable) and lasted ``seconds``."""
        self.calls += 1
        if not math.isfinite(seconds) or seconds <= 0 or taken < 0:
            return
        self.longest = max(self.longest, seconds)
        if self.budget <= 0:
            return
        smaller, fixed = self.least_smaller(taken)
        self._history.append((taken, seconds))
        if taken == 0 or (taken + RELEASE_WEIGHT <= limit and seconds <= self.budget):
            return  # not a full batch and quick: no evidence about bigger ones
        beyond = (seconds - fixed) / (taken - smaller)  # the time of each message more
        setup = fixed - smaller * beyond  # of the call itself, with no message
        waits = max(0.0, setup - self.budget * AIM * FIXED_CHARGED)
        self._per_message.append(max(seconds - waits, seconds * AIM) / taken)
        wanted = self.budget * AIM / min(self._per_message)
        bounded = min(limit * STEP, max(limit / STEP, wanted))
        self.size = min(self.most, max(LEAST, round(bounded)))

    def least_smaller(self, taken: int) -> tuple[int, float]:
        """Of the recent calls that took at most half of ``taken``, the quickest: how many
        it took and how long (0 and 0 without any)."""
        smaller = [(s, n) for n, s in self._history if 2 * n <= taken]
        seconds, count = min(smaller, default=(0.0, 0))
        return count, seconds


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
