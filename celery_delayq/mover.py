"""The mover loop: deliver due messages, then sleep until the next is due or a wake-up.

No fixed poll: the store reports when the next message is due (by the Redis clock)
and the schedule script publishes a wake-up when a message becomes its queue's
earliest. ``max_sleep`` is only a safety net for a wake-up lost while reconnecting.
Any number of movers may run at once; the atomic move script keeps delivery
exactly-once without a lock.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from .store import DelayedStore

logger = logging.getLogger(__name__)

#: How often a sleeping mover looks at its stop flag (no Redis traffic involved).
STOP_CHECK_SECONDS = 0.5
RETRY_MIN_SECONDS = 0.5


class Mover:
    """Moves due messages from one store until told to stop."""

    def __init__(
        self,
        connect: Callable[[], DelayedStore],
        *,
        max_sleep: float,
        retry_max: float,
        name: str = "mover",
    ) -> None:
        self.connect = connect
        self.max_sleep = max_sleep
        self.retry_max = retry_max
        self.name = name
        self.store: DelayedStore | None = None
        self._pubsub: Any = None
        self.moved_total = 0

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
                    self._reset()
                    delay, retry = retry, min(retry * 2, self.retry_max)
                self._wait(delay, stop)
        finally:
            self._reset()

    def move_once(self) -> float:
        """Deliver everything due now; seconds until the next message is due (capped)."""
        if self.store is None:
            self.store = self.connect()
        if self._pubsub is None:
            pubsub = self.store.client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self.store.keys.wakeup_channel)
            self._pubsub = pubsub
        result = self.store.move_all_due()
        self.moved_total += result.moved
        if result.moved or result.missing:
            logger.debug(
                "celery-delayq %s: moved %d due messages (%d unreadable)",
                self.name,
                result.moved,
                result.missing,
            )
        until_next = result.seconds_until_next()
        return self.max_sleep if until_next is None else min(until_next, self.max_sleep)

    def _wait(self, delay: float, stop: threading.Event) -> None:
        """Sleep up to ``delay`` seconds; return early on a wake-up or stop."""
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
                if self._pubsub.get_message(timeout=step) is not None:
                    return
            except Exception:  # noqa: BLE001 - reconnect on the next pass
                self._reset_pubsub()

    def _reset_pubsub(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._pubsub.close()
            self._pubsub = None

    def _reset(self) -> None:
        self._reset_pubsub()


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
