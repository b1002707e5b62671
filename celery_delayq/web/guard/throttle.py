"""A limit on failed logins per client address, kept in this process: after ``limit``
failures within ``window`` seconds an address is refused until the oldest expires.
Memory stays bounded: at most ``addresses`` are tracked, the least recently failing
forgotten first (an attacker with many addresses gains little against a strong token,
which serving beyond loopback requires: access.py)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable


class FailedLogins:
    def __init__(
        self,
        limit: int = 10,
        window: float = 300.0,
        addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit, self.window, self.addresses, self.clock = limit, window, addresses, clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def retry_after(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: now)."""
        with self._lock:
            times = self._recent(address)
            if len(times) < self.limit:
                return 0.0
            return max(0.0, times[0] + self.window - self.clock())

    def failed(self, address: str) -> None:
        with self._lock:
            times = self._recent(address)
            times.append(self.clock())
            self._failures[address] = times
            self._failures.move_to_end(address)
            while len(self._failures) > self.addresses:
                self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failures.pop(address, None)

    def _recent(self, address: str) -> deque[float]:
        times = self._failures.get(address, deque(maxlen=self.limit))
        while times and times[0] <= self.clock() - self.window:
            times.popleft()
        return times

    def __len__(self) -> int:
        return len(self._failures)
