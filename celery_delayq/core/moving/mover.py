"""The mover loop: deliver due messages, then sleep until the next is due or a wake-up.

No fixed poll: the store reports when the next message is due (by the Redis clock)
and the schedule script publishes a wake-up, carrying the due time, when a message
becomes its queue's earliest; a wake-up only brings the planned pass forward, so a
stream of new messages costs no extra passes. A dense instant (many messages due
together) is moved further ahead than ``move_ahead`` (move_due.lua): a wake-up brings
the pass forward by the most that can be, and that pass plans the instant's own lead.
Passes are at least ``MIN_PASS_SECONDS`` apart, so messages falling due in a steady
stream are moved a few at a time rather than one pass each. ``max_sleep`` is only a
safety net for a wake-up lost while reconnecting. Any number of movers may run at
once; the atomic move script keeps delivery exactly-once without a lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..results import MoveResult
from ..store import DelayedStore

logger = logging.getLogger(__name__)

#: Least time between two move passes of one mover: bounds the passes (and the CPU) a
#: stream of due messages costs, at the price of up to this much lateness.
MIN_PASS_SECONDS = 0.01
#: How often a sleeping mover looks at its stop flag (no Redis traffic involved).
STOP_CHECK_SECONDS = 0.5
RETRY_MIN_SECONDS = 0.5
#: Least time between two heartbeats of one mover (it also beats after every sleep).
HEARTBEAT_SECONDS = 1.0
#: A move this late (ms after the due time) means movers are missing or overwhelmed.
LAG_WARNING_MS = 5000
LAG_WARNING_EVERY_SECONDS = 60.0


class Mover:
    """Moves due messages from one store until told to stop."""

    def __init__(
        self,
        connect: Callable[[], DelayedStore],
        *,
        max_sleep: float,
        retry_max: float,
        name: str = "mover",
        on_connect: Callable[[DelayedStore], None] | None = None,
    ) -> None:
        self.connect = connect
        #: Called after every (re)connect, e.g. to warn about risky Redis settings.
        self.on_connect = on_connect
        self.max_sleep = max_sleep
        self.retry_max = retry_max
        self.name = name
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.store: DelayedStore | None = None
        self._pubsub: Any = None
        self.moved_total = 0
        self.passes_total = 0  # move passes so far (each: one script call per queue shard)
        self._last_move_ms: int | None = None
        self._last_beat = 0.0
        self._last_lag_warning = -LAG_WARNING_EVERY_SECONDS
        #: Redis clock minus this host's monotonic clock (ms), as of the last pass.
        self._clock_offset_ms = 0.0

    def run(self, stop: threading.Event) -> None:
        """Loop until ``stop`` is set; Redis outages are logged and retried, never fatal."""
        retry = RETRY_MIN_SECONDS
        try:
            while not stop.is_set():
                try:
                    delay = self.move_once()
                    retry = RETRY_MIN_SECONDS
                except Exception as exc:  # noqa: BLE001 - a mover must outlive any error
                    logger.warning(
                        "celery-delayq %s: %s: %s; retrying in %.1fs",
                        self.name,
                        type(exc).__name__,
                        exc,
                        retry,
                    )
                    self._reset_pubsub()
                    delay, retry = retry, min(retry * 2, self.retry_max)
                self._wait(max(delay, MIN_PASS_SECONDS), stop)
        finally:
            self._reset_pubsub()
            self._say_goodbye()

    def move_once(self) -> float:
        """Deliver everything due now; seconds until the next message is due (capped)."""
        if self.store is None:
            self.store = self.connect()
            if self.on_connect is not None:
                self.on_connect(self.store)
        if self._pubsub is None:
            self._pubsub = self.store.wakeup_subscription()
        result = self.store.move_all_due()
        self.passes_total += 1
        self._clock_offset_ms = result.now_ms - time.monotonic() * 1000
        self.moved_total += result.moved
        if result.moved or result.missing:
            self._last_move_ms = result.now_ms
            logger.debug(
                "celery-delayq %s: moved %d due messages (%d unreadable), latest %d ms late",
                self.name,
                result.moved,
                result.missing,
                result.max_lateness_ms,
            )
        self._warn_if_lagging(result)
        self._heartbeat(self.store, result)
        until_next = result.seconds_until_next()
        return self.max_sleep if until_next is None else min(until_next, self.max_sleep)

    def _wait(self, delay: float, stop: threading.Event) -> None:
        """Sleep up to ``delay`` seconds, less when a wake-up announces an earlier due
        time; return early on stop."""
        deadline = time.monotonic() + delay
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            step = min(remaining, STOP_CHECK_SECONDS)
            if self._pubsub is None:
                stop.wait(step)
                continue
            try:
                message = self._pubsub.get_message(timeout=step)
            except Exception:  # noqa: BLE001 - reconnect on the next pass
                self._reset_pubsub()
                continue
            if message is not None:
                deadline = min(deadline, self._local_time(message["data"]) - self._burst_lead())

    def _burst_lead(self) -> float:
        """Seconds before a woken-for due time to pass: up to the most a dense instant is
        moved ahead, so that the pass counts the instant and plans its own lead (the
        schedule wakes movers for the first message of a burst, not for the rest)."""
        return self.store.handover.burst_ahead_ms / 1000 if self.store is not None else 0.0

    def _local_time(self, due_ms: Any) -> float:
        """This host's monotonic time of a Redis-clock due time (now if unreadable)."""
        try:
            return (int(due_ms) - self._clock_offset_ms) / 1000
        except (TypeError, ValueError):
            return time.monotonic()

    def _reset_pubsub(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._pubsub.close()
            self._pubsub = None

    def _warn_if_lagging(self, result: MoveResult) -> None:
        now = time.monotonic()
        if (
            result.max_lateness_ms >= LAG_WARNING_MS
            and now - self._last_lag_warning >= LAG_WARNING_EVERY_SECONDS
        ):
            self._last_lag_warning = now
            logger.warning(
                "celery-delayq %s: delivered messages up to %.1f s after their due time; "
                "is a mover running everywhere it should, and keeping up?",
                self.name,
                result.max_lateness_ms / 1000,
            )

    def _heartbeat(self, store: DelayedStore, result: MoveResult) -> None:
        if time.monotonic() - self._last_beat < HEARTBEAT_SECONDS:
            return
        self._last_beat = time.monotonic()
        store.movers.beat(
            self.id,
            {
                "id": self.id,
                "name": self.name,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "last_seen": result.now_ms / 1000,
                "last_move": self._last_move_ms / 1000 if self._last_move_ms else None,
                "moved": self.moved_total,
                "passes": self.passes_total,
                # the move batch size the store's calls have settled on (batching.py)
                "batch": store.batch.size,
            },
        )

    def _say_goodbye(self) -> None:
        if self.store is not None:
            with contextlib.suppress(Exception):  # Redis may be the reason we stop
                self.store.movers.forget(self.id)


class MoverThread:
    """Runs a Mover in a daemon thread; start and stop may be called repeatedly."""

    def __init__(self, mover: Mover, on_exit: Callable[[], None] | None = None) -> None:
        self.mover = mover
        self.on_exit = on_exit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"celery-delayq-{self.mover.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        try:
            self.mover.run(self._stop)
        finally:
            if self.on_exit is not None:
                self.on_exit()
