"""Spacing between attempts at a server that is unreachable.

kombu's publish retry (``Connection.ensure``) sleeps only while it cannot reconnect to the
broker. When the broker is fine and the delayed store is not, its retries would follow
each other at once and use up ``max_retries`` in a second; a failover takes longer. So
the publishing side waits here before an attempt while the store keeps failing: the
retry policy's count then buys time, as it does for a broker outage.
"""

from __future__ import annotations

import threading
import time


class Backoff:
    """Doubling waits from ``first`` up to ``cap`` seconds while attempts fail; none once
    one succeeds. Shared by every thread that uses one server (a race only makes a
    wait one step shorter or longer)."""

    def __init__(self, first: float = 0.05, cap: float = 1.0) -> None:
        self.first = first
        self.cap = cap
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Sleep as long as the failures so far ask; how long that was."""
        delay = self._next
        if delay:
            time.sleep(delay)
        return delay

    def failed(self) -> None:
        with self._lock:
            self._next = min(self.cap, max(self.first, self._next * 2))

    def succeeded(self) -> None:
        self._next = 0.0
