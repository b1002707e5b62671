"""The ledger, indexed: scheduled tasks, executions, receipts, acks, process lives.

``Book.add`` takes ledger entries in any order (a run's files are read one after the
other), so the orchestrator can feed it while the run goes on; ``evidence`` (Redis's
append-only file) is attached once the run is over, for the questions the ledger
alone cannot answer.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from celery_delayq.testing.ledger import Event

from .aof import Push

#: A live worker's missing ack is put down to its broker connection only if the monkey
#: disrupted Redis (restart, client kill, pause, sleep) within this many seconds.
DISRUPTION_WINDOW = 30.0
DISRUPTIONS = ("redis-restart", "redis-up", "client-kill", "client-pause", "debug-sleep")


class Evidence(Protocol):
    """What Redis's append-only file can tell (``aof.AppendOnlyFile``)."""

    def pushes(self, task_id: str) -> list[Push]: ...

    def unacked_changes(self, tag: str) -> tuple[int, int]: ...


@dataclass
class Execution:
    id: str
    task_id: str
    retries: int
    tag: str | None
    incarnation: str
    acks_late: bool
    redelivered: bool
    eta: float | None
    began: float
    outcome: str | None = None

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    @property
    def published_retry_maybe(self) -> bool:
        """Whether this run may have published the next attempt (a kill can fall
        between the publish and the end entry; a failed publish may still be stored)."""
        return self.outcome in (None, "retry", "retry-failed")


@dataclass
class Incarnation:
    role: str
    acks_late: bool
    spawned: float
    killed_at: float | None = None
    exit_code: int | None = None
    stopped: bool = False  # stopped by the orchestrator at the end of the run

    @property
    def crashed(self) -> bool:
        return self.exit_code is not None and self.killed_at is None and not self.stopped


@dataclass(frozen=True)
class Receipt:
    t: float
    tag: str
    incarnation: str
    ok: bool  # its unacked entry was written


Key = tuple[str, int]  # task id, retries


class Book:
    """Everything the ledger says, indexed; fed incrementally with ``add``."""

    def __init__(self, visibility_timeout: float = 30.0) -> None:
        self.visibility_timeout = visibility_timeout
        self.scheduled: dict[str, float] = {}  # task id -> eta
        self.publish_failed: dict[str, str] = {}
        self.publish_retries: Counter[Key] = Counter()
        self.executions: dict[str, Execution] = {}
        self.by_message: defaultdict[Key, list[Execution]] = defaultdict(list)
        self.receipts: defaultdict[Key, list[Receipt]] = defaultdict(list)
        self.acks: defaultdict[str, list[tuple[float, str, bool]]] = defaultdict(list)
        self.ack_failures = 0
        self.incarnations: dict[str, Incarnation] = {}
        self.actions: list[Event] = []
        self.disruptions: list[float] = []
        #: Where unfinished messages were found at the end of a drain that timed out.
        self.locations: dict[Key, str] = {}
        #: Redis's append-only file, once the run is over.
        self.evidence: Evidence | None = None
        self.evidence_lookups = 0
        #: Per delivery tag, pushes onto the queue list other than redeliveries (AOF).
        self.fresh_pushes: Counter[str] | None = None
        #: Faults injected on purpose (``--inject-faults``), by kind.
        self.injected: Counter[str] = Counter()
        #: Runs of the periodic entry's occurrences (``O`` entries), in ledger order.
        self.ticks: list[Event] = []
        self._early_ends: dict[str, Event] = {}

    def add(self, events: Iterable[Event]) -> None:
        for event in events:
            getattr(self, "_on_" + event["k"], self._on_unknown)(event)

    def _on_unknown(self, event: Event) -> None:
        self.actions.append({**event, "ev": "unknown-entry"})

    def _on_O(self, event: Event) -> None:
        self.ticks.append(event)

    def _on_S(self, event: Event) -> None:
        self.scheduled[event["id"]] = event["eta"]

    def _on_F(self, event: Event) -> None:
        self.publish_failed[event["id"]] = event["e"]

    def _on_P(self, event: Event) -> None:
        self.publish_retries[(event["id"], event["r"])] += 1

    def _on_B(self, event: Event) -> None:
        execution = Execution(
            id=event["x"],
            task_id=event["id"],
            retries=event["r"],
            tag=event["tag"],
            incarnation=event["inc"],
            acks_late=event["al"],
            redelivered=event["rd"],
            eta=event["eta"],
            began=event["t"],
        )
        self.executions[execution.id] = execution
        self.by_message[(execution.task_id, execution.retries)].append(execution)
        if execution.id in self._early_ends:
            self._on_E(self._early_ends.pop(execution.id))

    def _on_E(self, event: Event) -> None:
        execution = self.executions.get(event["x"])
        if execution is None:  # read before its begin entry (never in one file, but cheap)
            self._early_ends[event["x"]] = event
        else:
            execution.outcome = event["o"]

    def _on_R(self, event: Event) -> None:
        receipt = Receipt(event["t"], event["tag"], event["inc"], event["ok"])
        self.receipts[(event["id"], event["r"])].append(receipt)

    def _on_A(self, event: Event) -> None:
        self.acks[event["tag"]].append((event["t"], event["inc"], event["ok"]))
        self.ack_failures += not event["ok"]

    def _on_Z(self, event: Event) -> None:
        self.injected[event["fault"]] += 1

    def _on_X(self, event: Event) -> None:
        kind = event["ev"]
        if kind == "spawn":
            self.incarnations[event["inc"]] = Incarnation(event["role"], event["al"], event["t"])
        elif kind == "kill":
            self.incarnations[event["inc"]].killed_at = event["t"]
        elif kind == "exit":
            incarnation = self.incarnations[event["inc"]]
            incarnation.exit_code = event["code"]
            incarnation.stopped = bool(event.get("stopped"))
        else:
            self.actions.append(event)
            if kind in DISRUPTIONS:
                self.disruptions.append(event["t"])

    # -- questions the analysis asks ------------------------------------------------

    def killed(self, incarnation: str) -> bool:
        known = self.incarnations.get(incarnation)
        return known is not None and known.killed_at is not None

    def acks_late(self, incarnation: str) -> bool:
        known = self.incarnations.get(incarnation)
        return known is not None and known.acks_late

    def acked(self, execution: Execution, before: float) -> bool | None:
        """True: an ack of this delivery succeeded; False: one failed; None: none sent."""
        acks = self.acks.get(execution.tag or "", [])
        results = [ok for t, inc, ok in acks if inc == execution.incarnation and t < before]
        if any(results):
            return True
        return False if results else None

    def held_past_visibility(self, execution: Execution) -> bool:
        """Whether the worker acked this delivery only after holding it unacked for longer
        than the visibility timeout, so kombu rightly redelivered it meanwhile."""
        here = execution.incarnation
        receipts = self.receipts.get((execution.task_id, execution.retries), [])
        received = [r.t for r in receipts if r.tag == execution.tag and r.incarnation == here]
        acks = self.acks.get(execution.tag or "", [])
        acked = [t for t, inc, ok in acks if ok and inc == here]
        return bool(received and acked) and min(acked) - min(received) >= self.visibility_timeout

    def disrupted_near(self, moment: float) -> bool:
        return any(moment - 2.0 <= t <= moment + DISRUPTION_WINDOW for t in self.disruptions)

    def pushes(self, key: Key) -> list[Push] | None:
        """Pushes of this message onto the queue list, per the AOF (None: no AOF)."""
        if self.evidence is None:
            return None
        self.evidence_lookups += 1
        return [push for push in self.evidence.pushes(key[0]) if push.retries == key[1]]

    def acks_in_aof(self, key: Key, tag: str) -> int | None:
        """Removals of ``tag`` from ``unacked`` other than restores (acks, rejects)."""
        pushes = self.pushes(key)
        if pushes is None or self.evidence is None:
            return None
        restores = sum(push.redelivered and push.tag == tag for push in pushes)
        return self.evidence.unacked_changes(tag)[1] - restores

    def expected(self) -> dict[Key, float | None]:
        """Messages whose publish is confirmed, with their ETA where known."""
        expected: dict[Key, float | None] = {
            (task_id, 0): eta for task_id, eta in self.scheduled.items()
        }
        for execution in self.executions.values():
            if execution.outcome == "retry":
                expected.setdefault((execution.task_id, execution.retries + 1), None)
        return expected

    def unfinished(self) -> list[Key]:
        """Expected messages none of whose executions ended."""
        return [
            key
            for key in self.expected()
            if not any(run.ended for run in self.by_message.get(key, ()))
        ]
