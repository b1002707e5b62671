"""The hand-over to a broker elsewhere: claim a batch of due messages (claim_due.lua),
publish it with confirms, then ack what the broker confirmed and give back what it refused
(ack_claimed.lua, release_claimed.lua; lua/handover.lua explains the protocol)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import redis

from ..batching import call_time
from ..layout.keys import QueueKeys
from ..layout.queue_counters import LATENESS_BUCKETS_MS
from ..lua import StoreScripts
from ..results import MoveResult
from . import MOVE_BATCH_BYTES, log_unreadable
from .publishing import Outgoing, Publisher, PublishReport, Sent

logger = logging.getLogger(__name__)

#: How long a queue (shard) stays its last claimer's (ms): other movers leave it alone
#: meanwhile, so one mover at a time publishes a shard's messages, in due order; a
#: claimer that died is replaced this soon.
CLAIMER_HOLD_MS = 2_000
#: The numbers a claim_due.lua reply starts with, before its key, record pairs.
CLAIM_HEADER = 7


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
    seconds: float  # how long the claim call kept Redis busy (batching.py's call_time)
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

    A flow-controlled message is claimed when its bucket releases it (lua/claim_due.lua);
    ``release_log``: how many releases each queue shard's log keeps
    (``delayq_release_log``; lua/gates.lua).

    In a backlog (more is due than one batch), with a caller that says ``more_calls``
    and a publisher that ``pipelines``, the next batch is claimed and sent before this
    one's confirms are awaited: Redis, the mover and the broker then work at the same
    time, as a plain publish loop keeps its broker busy. A pipelined batch is settled
    and acked by the next delivery of its queue, or by ``settle_pipelined`` or ``close``.
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
        release_log: int = 0,
    ) -> None:
        #: Called on the first delivery only: a store that only schedules (a producer's)
        #: never opens a publishing connection.
        self.make_publisher = make_publisher
        self._publisher: Publisher | None = None
        self.policy = policy or HandOverPolicy()
        self.scripts = scripts or StoreScripts.register(client)
        self.release_log = release_log
        #: Who claims: the same for every pass of one mover thread, across reconnects.
        self.claimer = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        #: Pipelined batches, by queue shard (QueueKeys.tagged).
        self._pipelined: dict[str, ClaimedBatch] = {}

    @property
    def publisher(self) -> Publisher:
        if self._publisher is None:
            self._publisher = self.make_publisher()
        return self._publisher

    def close(self) -> None:
        """Settle the pipelined batches, then close the publisher's broker connection,
        if one was made. Once one cannot be settled, the rest are only concluded with
        the answers already in (the broker is unwell: no more waiting on it)."""
        wait = True
        for batch in self._take_pipelined():
            try:
                self._settle(batch, wait=wait)
            except Exception:  # noqa: BLE001 - closing: what is not acked expires with its lease
                wait = False
        self._close_publisher()

    def _close_publisher(self) -> None:
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None

    def _take_pipelined(self) -> list[ClaimedBatch]:
        ahead, self._pipelined = list(self._pipelined.values()), {}
        return ahead

    def settle_pipelined(self) -> list[MoveResult]:
        return [self._settle(batch) for batch in self._take_pipelined()]

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        batch = self._pipelined.pop(queue.tagged, None)
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
            self._send_pipelined(queue, limit)
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
                self.release_log,
            ],
        )
        seconds = time.perf_counter() - started
        header = (int(value) for value in reply[:CLAIM_HEADER])
        now, next_due, missing, given_back, dead, held_for, worked = header
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
            Outgoing.from_record(key, raw, queue.own_list)
            for key, raw in _pairs(reply[CLAIM_HEADER:])
        ]
        seconds = call_time(worked, seconds)
        return ClaimedBatch(queue, owner, now, next_due, missing, held_for, seconds, messages)

    def _send_pipelined(self, queue: QueueKeys, limit: int) -> None:
        """Claim and send the queue's next batch now; a Redis error leaves it to the next
        delivery (which meets the error again, and reports it)."""
        try:
            batch = self._claim(queue, limit)
        except redis.RedisError as exc:
            logger.debug("celery-delayq: claiming ahead from %r failed: %s", queue.label, exc)
            return
        if batch.messages:
            batch.sent = self.publisher.send(batch.messages)
            self._pipelined[queue.tagged] = batch

    def _settle(self, batch: ClaimedBatch, wait: bool = True) -> MoveResult:
        """Wait for the broker's answers to a batch (``wait``; else take those already
        in); ack what it confirmed, give back the rest (refused: with a back-off,
        unanswered: due again at once). A broker error is raised once every claim is
        concluded, those of the pipelined batches too."""
        report = PublishReport()
        if batch.sent is not None:
            report = self.publisher.settle(batch.sent) if wait else batch.sent.report
        queue, owner = batch.queue, batch.owner
        moved, max_late = self._ack(queue, owner, report.confirmed)
        self._give_back_refused(queue, owner, report.refused)
        unanswered = [m.key for m in report.unanswered(batch.messages)]
        self._release(queue, owner, unanswered, refused=False, reason="")
        if report.error is not None and wait:
            for ahead in self._take_pipelined():
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
