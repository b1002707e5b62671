"""From ledger entries to counts: what was scheduled, what ran, what was lost or ran twice.

The unit is a *message*: a task id with its ``retries`` value (the producer's publish
is retries 0; each ``self.retry`` publishes the next). A message is *expected* once its
publish is confirmed: the producer's ``apply_async`` returned, or the task's
``self.retry`` raised ``Retry`` (it does so only after publishing). Its path is
followed by three witnesses: the worker's kombu channel notes receiving it (BRPOP
returned it, and its ``unacked`` entry was written or not), the task notes each
execution's begin and end, and, for the few cases these leave open, Redis's
append-only file says whether it was ever pushed onto the queue list (celery-delayq's
hand-over to kombu) and whether its ack reached Redis.

Lost: an expected message none of whose executions ended. By cause:

- Celery at-most-once (acks_late off): every execution began in a worker that was then
  SIGKILLed (Celery acks before running, so nothing remains to redeliver); or the AOF
  shows its ack (Celery acks as the pool takes the message) and the worker was
  SIGKILLed before the task's first line.
- celery-delayq (ours): never pushed onto the queue list although its publish was
  confirmed, or still in the delayed store at the end. Or taken off the queue list with
  no ``unacked`` entry ever written: the worker's consume path (brokers/redis/consume.py)
  takes and records a message in one step, so that is ours too. (With kombu's own BRPOP,
  ``delayq_reliable_consume = False``, a SIGKILL, a CLIENT KILL or a Redis restart loses
  the reply, or writing the entry fails, and the message is gone: the chaos report of
  2026-11-21 counted 41 in 10 minutes.)
- Unexplained (counted against celery-delayq too): anything else, e.g. held in
  ``unacked`` by a killed worker and never restored, or received by a worker that
  lived on and never ran it.

Duplicate: every execution of a message after its first. Two kinds, told apart by
the kombu delivery tag, which kombu assigns once per publish and a redelivery keeps:

1. The same delivery tag ran again. Only kombu sets the ``redelivered`` flag, when it
   puts a message from its ``unacked`` hash back on the queue list (``restore_visible``
   after the visibility timeout, here), i.e. only for deliveries whose ack never
   reached Redis; the store never sees such a message again. So this is
   Celery's at-least-once when the rerun is flagged redelivered and the previous run
   has no successful ack in the ledger, with the cause read from the ledger: its
   worker was SIGKILLed while running it (acks_late), or after it ended but before
   its ack reached Redis (acks_late), or as it began but before the early ack reached
   Redis (acks_late off: Celery acks once the pool has taken the message, a moment
   after the child starts it); or its worker's connection broke while it ran under
   acks_late (kombu's Channel.close puts every unacked message back, and the task's
   later ack then removes nothing); or its ack failed on a broken connection, or it sent
   none while the monkey was disrupting Redis, or it acked only after holding the
   message longer than the visibility timeout. A rerun without the flag of a message pushed twice
   onto the queue list (AOF) is the store's double delivery (ours); any other rerun
   is unexplained.
2. A different delivery tag: more than one message was published for the same task
   id and retries. A retry is published once per execution of the previous attempt
   (so a redelivered attempt publishes twice: Celery's at-least-once again), plus
   once per kombu publish retry after a connection error (the first attempt may have
   reached Redis, its reply lost). More copies than that are unexplained; and a
   retry published twice because its previous attempt ran twice by our fault is ours.

Hand-over: apart from executions, the whole AOF is scanned for pushes onto the queue
list. A delivery tag pushed more than once other than as kombu's redelivery is a
double hand-over (ours), even when kombu, which keys its bookkeeping by tag, ends up
running it once.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .book import Book, Execution, Key, Receipt
from .periodic_check import PeriodicOutcome, check_periodic

# Causes. The word before the colon says whose semantics explain the case.
LOST_AT_MOST_ONCE = "Celery: worker SIGKILLed while running it, acks_late off"
LOST_ACKED_NOT_STARTED = "Celery: acked as the pool took it (acks_late off), killed before it began"
LOST_IN_TRANSIT = "ours: taken off the queue list and never recorded in unacked"
LOST_UNACKED_WRITE = "ours: received, but its unacked entry was never written"
LOST_NEVER_PUSHED = "ours: never pushed onto the queue list"
LOST_STILL_STORED = "ours: still in the delayed store at the end"
LOST_STILL_QUEUED = "unexplained: still in the queue list or unacked at the end"
LOST_NOT_RESTORED = "unexplained: held in unacked by a killed worker, never restored"
LOST_LIVE = "unexplained: received by a worker that lived on, never finished"
LOST_NO_EVIDENCE = "unexplained: no worker received it, no AOF to tell why"

DUP_KILLED_RUNNING = "Celery: worker SIGKILLed while running it (acks_late)"
DUP_KILLED_AFTER_END = "Celery: worker SIGKILLed after the task ended, before its ack (acks_late)"
DUP_KILLED_EARLY_ACK = "Celery: worker SIGKILLed before its early ack reached Redis (acks_late off)"
DUP_ACK_FAILED = "Celery: its ack failed (broker connection lost)"
DUP_HELD_PAST_VT = "Celery: a live worker held it unacked past the visibility timeout"
DUP_ACK_NOT_SENT = "Celery: no ack sent while the monkey disrupted Redis"
DUP_CASCADE = "Celery: the previous attempt ran twice, so it retried twice"
DUP_CASCADE_OURS = "ours: the previous attempt ran twice by our fault, so it retried twice"
DUP_PUBLISH_RETRY = "Celery: kombu retried a publish after a connection error"
DUP_PUSHED_TWICE = "ours: pushed onto the queue list twice"
DUP_NOT_REDELIVERED = "unexplained: same delivery tag ran again without a kombu restore"
DUP_RESTORED_ON_CLOSE = (
    "Celery: its worker's broker connection broke while it ran (acks_late), so kombu put "
    "it back as the channel closed"
)
DUP_AFTER_ACK = "unexplained: redelivered although its ack had succeeded"
DUP_ACK_NOT_SENT_CALM = "unexplained: redelivered, no ack sent, no disruption near it"
DUP_EXTRA_MESSAGES = "unexplained: more messages than publishes"


def counts_against_us(cause: str) -> bool:
    """Whether a cause fails the run: celery-delayq's, or not explained by anyone."""
    return cause.startswith(("ours", "unexplained"))


@dataclass
class Outcome:
    """The run's numbers; causes map to counts."""

    scheduled: int = 0
    publish_failed: int = 0
    retries_published: int = 0
    retry_publish_failed: int = 0
    expected: int = 0
    executions: int = 0
    completed: int = 0
    unconfirmed_executed: int = 0
    lost: Counter[str] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    receipts: int = 0
    unacked_write_failures: int = 0
    acks_ok: int = 0
    acks_failed: int = 0
    executions_acks_late: int = 0
    evidence_lookups: int = 0
    injected: Counter[str] = field(default_factory=Counter)
    #: Per the AOF: messages pushed onto the queue list (not as redeliveries), and the
    #: extra pushes of delivery tags pushed more than once.
    handed_over: int = 0
    handed_over_again: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    actions: Counter[str] = field(default_factory=Counter)
    lateness_first: list[float] = field(default_factory=list)
    lateness_redelivered: list[float] = field(default_factory=list)
    #: First deliveries split at the worker's receipt: ETA to BRPOP (the store, its
    #: movers and the queue list), and BRPOP to the task's first line (the worker).
    lateness_to_receipt: list[float] = field(default_factory=list)
    lateness_in_worker: list[float] = field(default_factory=list)
    #: The periodic entry's occurrences (chaos/periodic_check.py).
    periodic: PeriodicOutcome = field(default_factory=PeriodicOutcome)

    @property
    def lost_against_us(self) -> int:
        return sum(n for cause, n in self.lost.items() if counts_against_us(cause))

    @property
    def duplicates_against_us(self) -> int:
        return sum(n for cause, n in self.duplicates.items() if counts_against_us(cause))

    @property
    def redis_restarts(self) -> int:
        return self.actions["redis-restart"]

    def note(self, cause: str, example: str) -> None:
        examples = self.examples.setdefault(cause, [])
        if len(examples) < 5:
            examples.append(example)


def analyze(book: Book) -> Outcome:
    outcome = Outcome(
        scheduled=len(book.scheduled),
        publish_failed=len(book.publish_failed),
        executions=len(book.executions),
        acks_ok=sum(ok for acks in book.acks.values() for _, _, ok in acks),
        acks_failed=book.ack_failures,
    )
    expected = book.expected()
    outcome.expected = len(expected)
    _count_executions(book, outcome, _first_receipts(book, outcome))
    _count_losses(book, outcome, expected)
    _count_duplicates(book, outcome, expected)
    for name, incarnation in book.incarnations.items():
        if incarnation.killed_at is not None:
            outcome.kills[incarnation.role] += 1
        if incarnation.crashed:
            outcome.crashes.append(f"{name} exited with {incarnation.exit_code}")
    outcome.actions = Counter(action["ev"] for action in book.actions)
    outcome.evidence_lookups = book.evidence_lookups
    outcome.injected = book.injected
    outcome.periodic = check_periodic(book)
    if book.fresh_pushes is not None:
        outcome.handed_over = sum(book.fresh_pushes.values())
        outcome.handed_over_again = sum(n - 1 for n in book.fresh_pushes.values() if n > 1)
    return outcome


def _first_receipts(book: Book, outcome: Outcome) -> dict[tuple[str | None, str], float]:
    """When each delivery (tag, incarnation) was first received; counts receipts."""
    receipts: dict[tuple[str | None, str], float] = {}
    for received in book.receipts.values():
        outcome.receipts += len(received)
        outcome.unacked_write_failures += sum(not r.ok for r in received)
        for receipt in received:
            receipts.setdefault((receipt.tag, receipt.incarnation), receipt.t)
    return receipts


def _count_executions(
    book: Book, outcome: Outcome, receipts: dict[tuple[str | None, str], float]
) -> None:
    """Retries, acks_late runs and lateness (first runs split at the receipt)."""
    for execution in book.executions.values():
        outcome.retries_published += execution.outcome == "retry"
        outcome.retry_publish_failed += execution.outcome == "retry-failed"
        outcome.executions_acks_late += execution.acks_late
        if execution.eta is None:
            continue
        late = execution.began - execution.eta
        if execution.redelivered:
            outcome.lateness_redelivered.append(late)
            continue
        outcome.lateness_first.append(late)
        receipt_t = receipts.get((execution.tag, execution.incarnation))
        if receipt_t is not None:
            outcome.lateness_to_receipt.append(receipt_t - execution.eta)
            outcome.lateness_in_worker.append(execution.began - receipt_t)


def _count_losses(book: Book, outcome: Outcome, expected: Collection[Key]) -> None:
    for key in expected:
        if any(run.ended for run in book.by_message.get(key, ())):
            outcome.completed += 1
        else:
            cause = lost_cause(book, key)
            outcome.lost[cause] += 1
            outcome.note(cause, f"task {key[0]} retries {key[1]}")


def _count_duplicates(book: Book, outcome: Outcome, expected: Collection[Key]) -> None:
    for key, runs in book.by_message.items():
        outcome.unconfirmed_executed += key not in expected
        for cause, example in duplicate_causes(book, key, runs):
            outcome.duplicates[cause] += 1
            outcome.note(cause, example)


def lost_cause(book: Book, key: Key) -> str:
    """Why an expected message never finished (see the module docstring)."""
    runs = book.by_message.get(key, [])
    if runs:
        if not all(book.killed(run.incarnation) for run in runs):
            return LOST_LIVE
        return LOST_AT_MOST_ONCE if any(not run.acks_late for run in runs) else LOST_NOT_RESTORED
    location = book.locations.get(key)
    if location == "delayed store":
        return LOST_STILL_STORED
    if location is not None:
        return LOST_STILL_QUEUED
    receipts = book.receipts.get(key, [])
    held = [receipt for receipt in receipts if receipt.ok]
    if held:
        return _held_cause(book, key, held)
    if receipts:
        return LOST_UNACKED_WRITE
    return _unreceived_cause(book, key)


def _unreceived_cause(book: Book, key: Key) -> str:
    """A message no worker noted receiving: what Redis's AOF says of it."""
    pushes = book.pushes(key)
    if pushes is None:
        return LOST_NO_EVIDENCE
    if not pushes:
        return LOST_NEVER_PUSHED
    if book.evidence is not None and any(
        book.evidence.unacked_changes(push.tag)[0] for push in pushes
    ):
        return LOST_NOT_RESTORED  # received (the worker died before noting it), not restored
    return LOST_IN_TRANSIT


def _held_cause(book: Book, key: Key, held: list[Receipt]) -> str:
    """A message whose ``unacked`` entry was written, and which never ran."""
    if not all(book.killed(receipt.incarnation) for receipt in held):
        return LOST_LIVE
    if not any(book.acks_late(receipt.incarnation) for receipt in held):
        acks = [book.acks_in_aof(key, receipt.tag) for receipt in held]
        if any(n is not None and n > 0 for n in acks):
            return LOST_ACKED_NOT_STARTED
    return LOST_NOT_RESTORED


def duplicate_causes(book: Book, key: Key, runs: list[Execution]) -> list[tuple[str, str]]:
    """One (cause, example) per execution of a message after its first."""
    runs = sorted(runs, key=lambda run: run.began)
    by_tag: dict[str | None, list[Execution]] = defaultdict(list)
    for run in runs:
        by_tag[run.tag].append(run)
    causes: list[tuple[str, str]] = []
    for tag, same in by_tag.items():
        for previous, rerun in zip(same, same[1:]):
            example = f"task {key[0]} retries {key[1]}, delivery tag {tag}"
            causes.append((rerun_cause(book, key, previous, rerun), example))
    extra = len(by_tag) - 1
    if extra > 0:
        example = f"task {key[0]} retries {key[1]}: {len(by_tag)} messages"
        causes.extend((cause, example) for cause in extra_message_causes(book, key, extra))
    return causes


def rerun_cause(book: Book, key: Key, previous: Execution, rerun: Execution) -> str:
    """Why a delivery tag ran again (see the module docstring)."""
    if not rerun.redelivered:
        pushes = book.pushes(key) or []
        fresh = sum(push.tag == rerun.tag and not push.redelivered for push in pushes)
        return DUP_PUSHED_TWICE if fresh > 1 else DUP_NOT_REDELIVERED
    if book.held_past_visibility(previous):
        return DUP_HELD_PAST_VT
    acked = book.acked(previous, before=rerun.began)
    if acked:
        # kombu's Channel.close restores every unacked message the channel delivered
        # (QoS.restore_unacked_once), so a connection lost mid-task under acks_late puts
        # the message back; the task's later ack then finds nothing left to remove.
        if previous.acks_late and book.disrupted_near(previous.began):
            return DUP_RESTORED_ON_CLOSE
        return DUP_AFTER_ACK
    if book.killed(previous.incarnation):
        if not previous.acks_late:
            return DUP_KILLED_EARLY_ACK
        return DUP_KILLED_AFTER_END if previous.ended else DUP_KILLED_RUNNING
    if acked is False:
        return DUP_ACK_FAILED
    return DUP_ACK_NOT_SENT if book.disrupted_near(previous.began) else DUP_ACK_NOT_SENT_CALM


def extra_message_causes(book: Book, key: Key, extra: int) -> list[str]:
    """Causes of ``extra`` messages beyond the first published for ``key``."""
    task_id, retries = key
    publishers, cascade = 1, DUP_CASCADE
    if retries > 0:
        before = (task_id, retries - 1)
        previous = book.by_message.get(before, [])
        publishers = sum(run.published_retry_maybe for run in previous)
        if any(counts_against_us(c) for c, _ in duplicate_causes(book, before, previous)):
            cascade = DUP_CASCADE_OURS
    retried = book.publish_retries[key]
    causes = []
    for n in range(1, extra + 1):
        if n < publishers:
            causes.append(cascade)
        elif n < publishers + retried:
            causes.append(DUP_PUBLISH_RETRY)
        else:
            causes.append(DUP_EXTRA_MESSAGES)
    return causes


def running_somewhere(book: Book) -> int:
    """Unfinished messages that a live worker has received or begun: they may still
    finish (the drain waits for these, and for Redis to hold nothing)."""
    return sum(lost_cause(book, key) == LOST_LIVE for key in book.unfinished())


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank ``q`` quantile (0 < q <= 1) of ``values``; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))]


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p99": percentile(values, 0.99),
        "max": max(values) if values else None,
    }
