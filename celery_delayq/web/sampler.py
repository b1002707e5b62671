"""The last hour of moves and lateness, sampled from the store's counters by the web
process itself (the counters are totals; rates and quantiles come from differences
between samples), so the charts need no Prometheus and nothing more in Redis."""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ..core.layout.queue_counters import lateness_quantile_ms

#: Counters summed over every queue: moved, late_count, late_sum_ms, late_le_<bound>.
Totals = dict[str, int]


@dataclass(frozen=True)
class Interval:
    """What happened between two samples."""

    end: float  # epoch seconds
    moved_per_second: float
    mean_lateness_ms: float | None  # None: nothing moved
    p99_lateness_ms: float | None  # the histogram bucket's upper bound


def interval(before: tuple[float, Totals], after: tuple[float, Totals]) -> Interval:
    (start, old), (end, new) = before, after

    def grew(name: str) -> int:
        return max(0, new.get(name, 0) - old.get(name, 0))

    count = grew("late_count")
    return Interval(
        end=end,
        moved_per_second=grew("moved") / max(end - start, 1e-9),
        mean_lateness_ms=grew("late_sum_ms") / count if count else None,
        p99_lateness_ms=lateness_quantile_ms({name: grew(name) for name in new}, 0.99),
    )


class CounterSampler:
    """Reads the counters every ``every`` seconds in a daemon thread, keeping ``keep``
    seconds of samples. A failed read (Redis down) leaves a gap, not an error. The thread
    ends once the sampler is dropped (its web app gone), so a process that builds and
    drops dashboards keeps no thread per dashboard reading Redis."""

    def __init__(self, read: Callable[[], Totals], every: float = 15.0, keep: float = 3600.0):
        self.read, self.every = read, every
        self.samples: deque[tuple[float, Totals]] = deque(maxlen=int(keep / every) + 1)
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start sampling (once; later calls do nothing)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(
            target=_sample_while_kept, args=(weakref.ref(self),), name=THREAD, daemon=True
        ).start()

    def sample(self) -> None:
        try:
            totals = self.read()
        except Exception:  # noqa: BLE001 - Redis may be down; the chart shows a gap
            return
        self.samples.append((time.time(), totals))

    def intervals(self) -> list[Interval]:
        samples = list(self.samples)
        return [interval(a, b) for a, b in zip(samples, samples[1:])]


#: The sampling thread's name.
THREAD = "delayq-web-sampler"


def _sample_while_kept(ref: weakref.ref[CounterSampler]) -> None:
    """Sample until the sampler is gone; held only weakly between samples."""
    while True:
        sampler = ref()
        if sampler is None:
            return
        sampler.sample()
        every = sampler.every
        del sampler
        time.sleep(every)
