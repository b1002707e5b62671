"""What the store hands back: a move's outcome, a queue's backlog, a pending message."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from .layout.gates import GateSpec, split_bucket
from .layout.record import Record, task_id_of


@dataclass(frozen=True)
class MoveResult:
    """What one pass of moving did, by the Redis server's clock."""

    moved: int
    next_due_ms: int | None
    now_ms: int
    missing: int = 0
    max_lateness_ms: int = 0
    #: Time (s) the script call whose work grows with the batch kept Redis busy (the
    #: client's wall time when the script measured nothing; 0: not timed); sizes the
    #: next batch (batching.py's ``call_time``).
    call_seconds: float = 0.0
    #: How much earlier (ms) than ``now_ms``'s look-ahead the next due instant is to be
    #: moved: a dense instant is moved further ahead (move_due.lua).
    next_lead_ms: int = 0
    #: How much of its batch the call used, when not ``moved + missing``: a release from
    #: a flow-control bucket counts as several messages (lua/gates.lua).
    batch_used: int | None = None

    def seconds_until_next(self) -> float | None:
        """Until the next pass is due: the next due time, less its extra lead."""
        if self.next_due_ms is None:
            return None
        return max(0.0, (self.next_due_ms - self.next_lead_ms - self.now_ms) / 1000.0)

    @property
    def more_due(self) -> bool:
        """Whether the batch's size or byte budget stopped it while more was due."""
        return bool(
            self.moved + self.missing
            and self.next_due_ms is not None
            and self.next_due_ms <= self.now_ms
        )

    def then(self, later: MoveResult) -> MoveResult:
        """This call and ``later``, the next call on the same shard, as one: the counts
        of both, and ``later``'s next due time, which holds now."""
        return replace(
            later,
            moved=self.moved + later.moved,
            missing=self.missing + later.missing,
            max_lateness_ms=max(self.max_lateness_ms, later.max_lateness_ms),
            call_seconds=self.call_seconds + later.call_seconds,
            batch_used=None,  # of one call only
        )

    @classmethod
    def merged(cls, results: Sequence[MoveResult], server_ms: Callable[[], int]) -> MoveResult:
        """The results of separate shards (or batches) as one: their counts summed, and
        the next due time with its own lead (never one shard's lead with another's due
        time) of the shard to wake for first: one with more due now (``more_due``, so
        the caller passes again at once and the merge says why), else the earliest wake
        time (due time less lead) of any shard. With no result, nothing is due and
        ``server_ms`` gives the time."""
        if len(results) == 1:
            return results[0]
        timed = [r for r in results if r.next_due_ms is not None]
        first = min(timed, key=_wake_order, default=None)
        return cls(
            sum(r.moved for r in results),
            None if first is None else first.next_due_ms,
            max((r.now_ms for r in results), default=0) or server_ms(),
            sum(r.missing for r in results),
            max((r.max_lateness_ms for r in results), default=0),
            sum(r.call_seconds for r in results),
            0 if first is None else first.next_lead_ms,
        )


def _wake_order(result: MoveResult) -> tuple[bool, int]:
    """Which shard's result a merge wakes for first: more due now before any wake time
    (another shard's lead can put its wake time before now, yet nothing of it is due)."""
    return (not result.more_due, (result.next_due_ms or 0) - result.next_lead_ms)


@dataclass(frozen=True)
class QueueBacklog:
    """Pending delayed messages of one queue."""

    queue: str
    pending: int
    overdue: int
    next_due: float | None  # epoch seconds
    server_time: float = 0.0  # Redis clock when read, epoch seconds
    #: Of ``pending``: claimed by a mover that is handing them to another broker.
    in_flight: int = 0
    #: Not pending: messages the broker kept refusing (``DelayedStore.dead``).
    dead: int = 0
    #: Of ``pending``: due, and waiting in a flow-control bucket until its limits allow
    #: their release (never ``overdue``: a limit holds them, not a late mover).
    waiting: int = 0

    @property
    def lag(self) -> float:
        """Age of the oldest overdue message in seconds (0 when nothing is overdue)."""
        if self.next_due is None or not self.overdue:
            return 0.0
        return max(0.0, self.server_time - self.next_due)


@dataclass(frozen=True)
class PendingMessage:
    """One pending delayed message, as listed by ``DelayedStore.pending``."""

    queue: str
    key: bytes  # its message key (layout/record.py)
    due: float  # epoch seconds
    record: Record

    @property
    def task_id(self) -> str:
        return task_id_of(self.key)

    @property
    def due_ms(self) -> int:
        return round(self.due * 1000)

    @property
    def position(self) -> Position:
        """Where it stands in the listing order (for paging on after it)."""
        return Position(self.due_ms, self.queue, self.key)


@dataclass(frozen=True, order=True)
class Position:
    """A place in the total order of pending messages: due time (ms), queue, message key
    (within a due time, sorted sets order members bytewise: so does ``bytes``)."""

    due_ms: int
    queue: str
    key: bytes

    def start_in(self, queue: str) -> tuple[str, bytes]:
        """Where ``queue``'s listing starts after this position: (lowest due ms, and the
        message key to start after among those due exactly then, b"" for none)."""
        if queue < self.queue:  # its messages of this due time come before
            return str(self.due_ms + 1), b""
        if queue == self.queue:
            return str(self.due_ms), self.key
        return str(self.due_ms), b""


@dataclass(frozen=True)
class DeadLetter:
    """A message that kept failing to reach its broker, kept with the reason."""

    queue: str
    key: bytes
    record: Record
    dead_at: float  # epoch seconds (Redis clock)
    tries: int
    reason: str

    @property
    def task_id(self) -> str:
        return task_id_of(self.key)


@dataclass(frozen=True)
class BucketState:
    """One flow-control bucket of a queue shard (lua/gates.lua), as read at ``now``."""

    queue: str
    shard: int
    name: bytes  # as stored: the task's name, or it, NUL and the limit key
    #: Its limits, as the last message to enter it said (None: its state is gone).
    limits: GateSpec | None
    waiting: int
    #: Releases since its state was made (a state is forgotten a day, to an hour more,
    #: after it stops mattering: then the count starts again).
    released: int
    #: Per rate of ``limits``: releases in the last window of the rate's length, from
    #: the release log (None: not counted, or no log is kept).
    in_window: tuple[int, ...] | None
    #: The log read ends inside a window: its count is at least that, maybe more.
    window_short: bool
    running: int  # slots taken and not run out (a concurrency limit)
    #: No release before this (epoch seconds; inf: paused); None: no hold in force.
    held_until: float | None
    #: When its next waiting message may go (epoch seconds; inf: paused): its rates,
    #: slots and hold all considered; None: nothing waits.
    next_release: float | None
    now: float  # the Redis clock when read, epoch seconds

    @property
    def text(self) -> str:
        """The name, decoded (a crafted one with its bad bytes escaped)."""
        return self.name.decode("utf-8", "backslashreplace")

    @property
    def task(self) -> str:
        return split_bucket(self.text)[0]

    @property
    def key(self) -> str | None:
        """Its limit key, None for the task's own bucket."""
        return split_bucket(self.text)[1]

    @property
    def throttled(self) -> bool:
        """Messages wait and none may go yet."""
        return self.next_release is not None and self.next_release > self.now

    @property
    def held(self) -> bool:
        """Paused, or held until a time to come."""
        return self.held_until is not None


@dataclass
class TaskFlow:
    """One task's buckets in one queue, added up (its limit keys are not told apart)."""

    queue: str
    task: str
    buckets: int = 0
    keyed: int = 0  # buckets of a limit key
    waiting: int = 0
    released: int = 0  # ever, a count that never goes back (not the buckets' own)
    running: int = 0
    held: int = 0  # buckets paused or held until a time to come
    throttled: int = 0  # buckets with messages waiting for their limits

    @classmethod
    def per_task(
        cls, buckets: Sequence[BucketState], released: Mapping[tuple[str, str], int]
    ) -> list[TaskFlow]:
        """The buckets added up per queue and task, with each (queue, task)'s
        ``released`` count (a task counted but with no bucket left is listed too),
        sorted by queue and task."""
        flows = {name: cls(*name, released=count) for name, count in released.items()}
        for each in buckets:
            flow = flows.setdefault((each.queue, each.task), cls(each.queue, each.task))
            flow.buckets += 1
            flow.keyed += each.key is not None
            flow.waiting += each.waiting
            flow.running += each.running
            flow.held += each.held
            flow.throttled += each.throttled
        return [flows[name] for name in sorted(flows)]
