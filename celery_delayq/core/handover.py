"""The one seam through which due messages leave the store.

A ``HandOver`` delivers at most one bounded batch of a queue's due messages and says
what it did. Movers, ``promote`` and every other caller go through it, so a store whose
queues live elsewhere needs only another implementation here, not a branch in the
script path.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from .layout.keys import QueueKeys
from .layout.queue_counters import LATENESS_BUCKETS_MS
from .layout.record import Record, task_id_of
from .lua_scripts import StoreScripts
from .results import MoveResult

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

#: A dense instant is moved this long ahead per message in it (us) when that exceeds the
#: move-ahead: about what a busy solo worker takes to fetch and hold one ETA message, so
#: two or more workers have fetched the instant by its ETA (move_due.lua).
BURST_FETCH_US = 2000
#: Messages due within this long (ms) of the earliest count as one instant.
BURST_INSTANT_MS = 100

#: How long a queue (shard) stays its last claimer's (ms): other movers leave it alone
#: meanwhile, so one mover at a time publishes a shard's messages, in due order; a
#: claimer that died is replaced this soon.
CLAIMER_HOLD_MS = 2_000


class HandOver(Protocol):
    """Delivers the due messages of one queue, at most ``limit`` of them per call."""

    #: How long before their due time messages are delivered (MoveResult.now_ms is the
    #: Redis time plus this: the time messages are judged due by).
    ahead_ms: int
    #: The most a dense instant is delivered ahead beyond ``ahead_ms`` (0: never).
    burst_ahead_ms: int

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        """``more_calls``: the caller calls again for this queue while its result says
        more is due, then ``settle_ahead`` (``move_all_due``), so a hand-over may send
        the next batch before this one is confirmed."""
        ...

    def settle_ahead(self) -> list[MoveResult]:
        """Conclude every batch sent ahead (their results)."""
        ...

    def close(self) -> None:
        """Release what delivering holds (a broker connection); the next delivery
        opens it again."""


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
    """

    def __init__(
        self,
        client: redis.Redis,
        scripts: StoreScripts | None = None,
        queue_lists: Callable[[str], list[str]] | None = None,
        ahead_ms: int = 0,
        burst_ahead_ms: int = 0,
    ) -> None:
        self.scripts = scripts or StoreScripts.register(client)
        self.queue_lists = queue_lists
        self.ahead_ms = ahead_ms
        self.burst_ahead_ms = burst_ahead_ms

    def close(self) -> None:
        """Nothing to release: the move runs on the store's own connection."""

    def settle_ahead(self) -> list[MoveResult]:
        """Nothing is ever ahead: a move is done when its script returns."""
        return []

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        lists = self.queue_lists(queue.queue) if self.queue_lists else [queue.own_list]
        started = time.perf_counter()
        moved, next_due, now, missing, max_late, further = self.scripts.move_due(
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
                len(lists),
                *lists,
                *LATENESS_BUCKETS_MS,
            ],
        )
        seconds = time.perf_counter() - started
        next_due_ms = None if next_due < 0 else int(next_due)
        log_unreadable(queue, int(missing))
        return MoveResult(
            int(moved), next_due_ms, int(now), int(missing), int(max_late), seconds, int(further)
        )


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


@dataclass(frozen=True)
class Outgoing:
    """A claimed message on its way to the broker."""

    key: bytes  # its message key in the store
    destination: str  # where the transport puts it: a kombu list, an exchange and key...
    payload: bytes  # the kombu envelope, as stored
    due_ms: int
    expires_ms: int | None = None  # the queue's x-expires, when its publisher declared one

    @classmethod
    def from_record(cls, key: bytes, raw: bytes, own_list: str) -> Outgoing:
        """The outgoing message of a claimed record (``claim_due.lua``'s reply)."""
        record = Record.decode(raw, own_list)
        return cls(key, record.destination, record.payload, record.due_ms, record.expires_ms)

    @property
    def stable_id(self) -> str:
        """The same for every publish of this delayed message (a republish after a mover
        died included), different for another delayed message of the same task: a
        consumer can dedupe on it."""
        return f"{task_id_of(self.key)}@{self.due_ms}"


@dataclass
class PublishReport:
    """What the broker said about a batch of messages."""

    confirmed: list[bytes] = field(default_factory=list)
    refused: dict[bytes, str] = field(default_factory=dict)  # key -> the broker's reason
    #: Set when publishing stopped (the broker became unreachable): every message not
    #: confirmed or refused is in an unknown state.
    error: Exception | None = None

    def unanswered(self, messages: Sequence[Outgoing]) -> list[Outgoing]:
        """The messages neither confirmed nor refused yet."""
        answered = {*self.confirmed, *self.refused}
        return [message for message in messages if message.key not in answered]

    def refuse_unreadable(self, message: Outgoing, exc: Exception) -> None:
        """Refuse a stored message that cannot be made a publish (crafted bytes)."""
        self.refused[message.key] = f"unreadable message: {exc!r}"

    def refuse_unencodable(self, message: Outgoing, exc: Exception) -> None:
        """Refuse a stored message the broker's client cannot encode (a header of a type
        it does not know): this message's fault, not the connection's."""
        self.refused[message.key] = f"cannot be encoded for the broker: {type(exc).__name__}: {exc}"


@dataclass
class Sent:
    """A batch sent to the broker; its report fills as the broker answers."""

    messages: Sequence[Outgoing]
    report: PublishReport = field(default_factory=PublishReport)
    #: The publisher's own record of what is still awaited (None: nothing is).
    awaiting: Any = None


class Publisher(Protocol):
    """Publishes messages to the broker, with confirms, and reports on each.

    ``send`` puts a batch on its way, ``settle`` waits for the broker's answers to it.
    A publisher with ``pipelines`` set returns from ``send`` before the confirms come,
    so the hand-over claims and sends the next batch while the broker takes this one
    in; the others are done when ``send`` returns.
    """

    pipelines: bool

    def send(self, messages: Sequence[Outgoing]) -> Sent: ...

    def settle(self, sent: Sent) -> PublishReport: ...

    def close(self) -> None: ...


class ConfirmedOnReturn:
    """A ``Publisher`` whose batch is confirmed when one call returns (a script call on
    a Redis broker, SQS's synchronous sends): ``send`` publishes it, ``settle`` hands
    back the report."""

    pipelines = False

    def send(self, messages: Sequence[Outgoing]) -> Sent:
        return Sent(messages, self.publish_now(messages))

    def settle(self, sent: Sent) -> PublishReport:
        return sent.report

    def publish_now(self, messages: Sequence[Outgoing]) -> PublishReport:
        raise NotImplementedError


@dataclass(frozen=True)
class HandOverPolicy:
    """How hard a cross-system hand-over tries before it gives a message up."""

    #: A claim not acked within this many ms comes back (its mover died or hung).
    lease_ms: int = 60_000
    #: The failed hand-over that reaches this count dead-letters the message.
    most_tries: int = 5
    #: Back-off after the first refusal; it doubles with each further one.
    retry_backoff_ms: int = 1_000


@dataclass
class ClaimedBatch:
    """One ``claim_due`` call's messages, sent or about to be."""

    queue: QueueKeys
    owner: str
    now: int
    next_due: int  # -1: none
    missing: int
    held_for: int  # ms another mover holds the queue shard for (0: it is ours)
    seconds: float  # how long the claim call took
    messages: list[Outgoing]
    sent: Sent | None = None

    @property
    def more_due(self) -> bool:
        """More of the queue is due than this batch took."""
        return 0 <= self.next_due <= self.now


class ClaimPublishAck:
    """Due messages go to a broker in another system: claimed in Redis, published with
    confirms, then acked in Redis (``lua/handover.lua`` explains the protocol).

    A message leaves Redis only after the broker confirmed it, so nothing is lost; a
    mover killed between the confirm and the ack publishes one duplicate (its claim
    expires and the message is published again), which carries the same stable id.

    In a backlog (more is due than one batch), with a caller that says ``more_calls``
    and a publisher that ``pipelines``, the next batch is claimed and sent before this
    one's confirms are awaited: Redis, the mover and the broker then work at the same
    time, as a plain publish loop keeps its broker busy. A batch sent ahead is settled
    and acked by the next delivery of its queue, or by ``settle_ahead`` or ``close``.
    """

    #: Claimed messages go out when due: the AMQP hand-over renames their ``eta`` header
    #: (brokers/amqp/envelope.py), so a worker would start one moved ahead at once.
    ahead_ms = 0
    burst_ahead_ms = 0

    def __init__(
        self,
        client: redis.Redis,
        make_publisher: Callable[[], Publisher],
        policy: HandOverPolicy | None = None,
        scripts: StoreScripts | None = None,
    ) -> None:
        #: Called on the first delivery only: a store that only schedules (a producer's)
        #: never opens a publishing connection.
        self.make_publisher = make_publisher
        self._publisher: Publisher | None = None
        self.policy = policy or HandOverPolicy()
        self.scripts = scripts or StoreScripts.register(client)
        #: Who claims: the same for every pass of one mover thread, across reconnects.
        self.claimer = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        #: Batches sent ahead, by queue shard (QueueKeys.tagged).
        self._ahead: dict[str, ClaimedBatch] = {}

    @property
    def publisher(self) -> Publisher:
        if self._publisher is None:
            self._publisher = self.make_publisher()
        return self._publisher

    def close(self) -> None:
        """Settle the batches sent ahead, then close the publisher's broker connection,
        if one was made. Once one cannot be settled, the rest are only concluded with
        the answers already in (the broker is unwell: no more waiting on it)."""
        wait = True
        for batch in self._take_ahead():
            try:
                self._settle(batch, wait=wait)
            except Exception:  # noqa: BLE001 - closing: what is not acked expires with its lease
                wait = False
        self._close_publisher()

    def _close_publisher(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def _take_ahead(self) -> list[ClaimedBatch]:
        ahead, self._ahead = list(self._ahead.values()), {}
        return ahead

    def settle_ahead(self) -> list[MoveResult]:
        return [self._settle(batch) for batch in self._take_ahead()]

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        batch = self._ahead.pop(queue.tagged, None)
        if batch is None:
            batch = self._claim(queue, limit)
            if batch.messages:
                batch.sent = self.publisher.send(batch.messages)
        if batch.held_for:  # another mover claims from this shard: look again once its hold ends
            retry_at = batch.now + batch.held_for
            next_due = max(batch.next_due, retry_at) if batch.next_due >= 0 else None
            return MoveResult(0, next_due, batch.now)
        sent = batch.sent
        if (
            more_calls
            and batch.more_due
            and sent is not None
            and sent.report.error is None
            and self.publisher.pipelines
        ):
            self._send_ahead(queue, limit)
        return self._settle(batch)

    def _claim(self, queue: QueueKeys, limit: int) -> ClaimedBatch:
        """Claim up to ``limit`` due messages (say what the claim found amiss)."""
        owner = uuid.uuid4().hex
        policy = self.policy
        started = time.perf_counter()
        reply = self.scripts.claim_due(
            keys=queue.handover_keys(),
            args=[
                *queue.page_args(),
                limit,
                MOVE_BATCH_BYTES,
                owner,
                policy.lease_ms,
                policy.most_tries,
                self.claimer,
                CLAIMER_HOLD_MS,
            ],
        )
        seconds = time.perf_counter() - started
        now, next_due, missing, given_back, dead, held_for = (int(value) for value in reply[:6])
        if given_back:
            logger.warning(
                "celery-delayq: %d claim(s) of queue %r expired (a mover died or hung after "
                "claiming); they are due again, and may reach the broker twice",
                given_back,
                queue.queue,
            )
        self._log_dead(queue, dead, "their claims kept expiring")
        log_unreadable(queue, missing)
        messages = [
            Outgoing.from_record(key, raw, queue.own_list) for key, raw in _pairs(reply[6:])
        ]
        return ClaimedBatch(queue, owner, now, next_due, missing, held_for, seconds, messages)

    def _send_ahead(self, queue: QueueKeys, limit: int) -> None:
        """Claim and send the queue's next batch now; a Redis error leaves it to the next
        delivery (which meets the error again, and reports it)."""
        try:
            batch = self._claim(queue, limit)
        except redis.RedisError as exc:
            logger.debug("celery-delayq: claiming ahead from %r failed: %s", queue.label, exc)
            return
        if batch.messages:
            batch.sent = self.publisher.send(batch.messages)
            self._ahead[queue.tagged] = batch

    def _settle(self, batch: ClaimedBatch, wait: bool = True) -> MoveResult:
        """Wait for the broker's answers to a batch (``wait``; else take those already
        in); ack what it confirmed, give back the rest (refused: with a back-off,
        unanswered: due again at once). A broker error is raised once every claim is
        concluded, those of the batches sent ahead too."""
        report = PublishReport()
        if batch.sent is not None:
            report = self.publisher.settle(batch.sent) if wait else batch.sent.report
        queue, owner = batch.queue, batch.owner
        moved, max_late = self._ack(queue, owner, report.confirmed)
        self._give_back_refused(queue, owner, report.refused)
        unanswered = [m.key for m in report.unanswered(batch.messages)]
        self._release(queue, owner, unanswered, refused=False, reason="")
        if report.error is not None and wait:
            for ahead in self._take_ahead():
                with contextlib.suppress(redis.RedisError):  # else their leases expire
                    self._settle(ahead, wait=False)
            self._close_publisher()
            raise report.error
        # A refused message is due again after its back-off, at the earliest this soon.
        retry_at = batch.now + self.policy.retry_backoff_ms if report.refused else -1
        due_times = [t for t in (batch.next_due, retry_at) if t >= 0]
        next_due_ms = min(due_times) if due_times else None
        return MoveResult(moved, next_due_ms, batch.now, batch.missing, max_late, batch.seconds)

    def _ack(self, queue: QueueKeys, owner: str, confirmed: list[bytes]) -> tuple[int, int]:
        if not confirmed:
            return 0, 0
        acked, _, max_late = self.scripts.ack_claimed(
            keys=queue.handover_keys(),
            args=[*queue.page_args(), owner, len(confirmed), *confirmed, *LATENESS_BUCKETS_MS],
        )
        return int(acked), int(max_late)

    def _give_back_refused(self, queue: QueueKeys, owner: str, refused: dict[bytes, str]) -> None:
        """Give refused messages back with a back-off, one call per reason (kept on one
        line: a broker's may span several, as botocore's do)."""
        by_reason: dict[str, list[bytes]] = defaultdict(list)
        for key, reason in refused.items():
            by_reason[" ".join(reason.split())].append(key)
        for reason, keys in by_reason.items():
            logger.warning(
                "celery-delayq: the broker refused %d message(s) of queue %r: %s",
                len(keys),
                queue.queue,
                reason,
            )
            dead = self._release(queue, owner, keys, refused=True, reason=reason)
            self._log_dead(queue, dead, reason)

    def _release(
        self, queue: QueueKeys, owner: str, messages: list[bytes], *, refused: bool, reason: str
    ) -> int:
        """Give claimed messages back; how many were dead-lettered."""
        if not messages:
            return 0
        policy = self.policy
        _, dead = self.scripts.release_claimed(
            keys=queue.handover_keys(),
            args=[
                *queue.page_args(),
                owner,
                int(refused),
                policy.most_tries,
                policy.retry_backoff_ms,
                reason,
                *messages,
            ],
        )
        return int(dead)

    @staticmethod
    def _log_dead(queue: QueueKeys, dead: int, reason: str) -> None:
        if dead:
            logger.error(
                "celery-delayq: %d message(s) of queue %r moved to the dead letters: %s "
                "(see `celery delayq list --dead`)",
                dead,
                queue.queue,
                reason,
            )


def _pairs(flat: list[bytes]) -> list[tuple[bytes, bytes]]:
    return list(zip(flat[::2], flat[1::2]))
