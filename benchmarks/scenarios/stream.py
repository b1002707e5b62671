"""Scenario 3b: lateness under load, a steady stream of tasks falling due.

Tasks fall due at a constant rate over a window. They are all published first, as
fast as several publisher processes can, with ETAs starting once publishing is done
(so countdowns run from about that lead up to lead + window: seconds to a minute or
more). Publishing during the window would make the two shared cores of this machine
the bottleneck (publishers at ~0.5 ms per task plus workers executing 1,000 tasks/s),
and both sides would measure CPU starvation rather than delivery. Lateness is what the
task itself records (start - ETA), so it includes the worker's own queueing. For
delayq the store's move-lateness histogram is read too (move time - due time, by the
Redis clock).
Tasks that have not started a minute after the last due time count as infinitely
late (shown as inf; the CDF then ends below 1).

On the delayq side the same stream is then sent again to the same workers the way no
delayed-task system can beat: each task published at its due time without an ETA, its
lateness counted from its publish (the physical limit). delayq's p99 is compared with
that limit's.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

from celery_delayq.testing import wait_until

from .. import plots
from ..harness import Run, log
from ..publishers import Send, publish_parallel
from ..report import MetricSpec, Target
from ..runconfig import Side
from ..store_tools import move_lateness, mover_passes, pass_rate
from .lateness import lateness_specs, lateness_values, percentile

WORKERS = 2
PUBLISHERS = 2
TARGET_P99_MS = 50.0
#: Tasks per second the publishers are assumed to reach (measured from ~700 to ~3,500 here,
#: vanilla workers taking every ETA message in as it comes; a margin below that).
PUBLISH_RATE = 600.0
#: How long after the last due time tasks may still start before the rest count as lost.
GRACE_SECONDS = 60.0


class SteadyStream:
    key = "stream"

    def __init__(self, rate: float, window: float) -> None:
        self.rate = rate
        self.window = window
        self.samples: dict[Side, list[float]] = {}

    @property
    def tasks(self) -> int:
        return round(self.rate * self.window)

    @property
    def title(self) -> str:
        return (
            f"3b. Lateness under load, {self.rate:,.0f} tasks/s falling due for "
            f"{self.window:g}s ({self.tasks:,} tasks, published ahead in "
            f"~{self.lead:.0f}s), {WORKERS} workers"
        )

    @property
    def lead(self) -> float:
        """Seconds from the start of publishing to the first due time."""
        return 2.0 + self.tasks / PUBLISH_RATE

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            *lateness_specs(Target(f"< {TARGET_P99_MS:g} ms", lambda v: v < TARGET_P99_MS)),
            MetricSpec("limit_p50", "the limit (published at the due time), p50", "ms"),
            MetricSpec("limit_p99", "the limit (published at the due time), p99", "ms"),
            MetricSpec(
                "over_limit",
                "delayq p99 over the limit's p99",
                "ms",
                Target("<= 5 ms", lambda v: v <= 5),
            ),
            MetricSpec("move_p99", "delayq move lateness p99 (histogram bucket bound)", "ms"),
            MetricSpec("move_mean", "delayq move lateness mean (histogram)", "ms"),
            MetricSpec("passes", "delayq mover passes per second (both workers' movers)", "/s"),
            MetricSpec(
                "queue_peak",
                "most messages waiting in the queue list (workers behind)",
                "",
                digits=0,
            ),
            MetricSpec(
                "executed",
                "executions",
                "",
                Target(f"= {self.tasks:,}", lambda v: v == self.tasks),
                digits=0,
            ),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(WORKERS)
        first_due = time.time() + self.lead
        sends: list[Send] = [(0.0, first_due + i / self.rate) for i in range(self.tasks)]
        log(f"  publishing {self.tasks:,} tasks over {PUBLISHERS} processes")
        publish_parallel(run.config, sends, PUBLISHERS)
        if time.time() > first_due:
            raise RuntimeError("publishing outlasted the lead: the stream began early")
        passes_before = mover_passes(run.config.broker_url) if run.config.delayq else None
        peak = QueuePeak(run)
        try:
            late_ms = self._lateness(run, first_due)
        finally:
            peak.stop()
        self.samples[run.side] = late_ms
        values: dict[str, float | None] = {
            **lateness_values(late_ms),
            "executed": float(sum(1 for v in late_ms if v != math.inf)),
            "queue_peak": float(peak.value),
        }
        if passes_before is not None:
            values.update(move_lateness(run.config.broker_url, run.config.queue))
            values["passes"] = pass_rate(run.config.broker_url, passes_before)
            limit_ms = self._limit(run)
            values["limit_p50"] = percentile(limit_ms, 50)
            values["limit_p99"] = percentile(limit_ms, 99)
            values["over_limit"] = percentile(late_ms, 99) - percentile(limit_ms, 99)
        return values

    def _lateness(self, run: Run, first_due: float) -> list[float]:
        """Each task's lateness (ms), sorted, once all ran; inf for those that did not."""
        try:
            wait_until(
                lambda: run.execution_count() >= self.tasks,
                timeout=max(0.0, first_due + self.window - time.time()) + GRACE_SECONDS,
                what=f"all {self.tasks} tasks ran",
                interval=0.1,  # polls lightly: Redis is part of what is measured
            )
        except TimeoutError as exc:  # overloaded workers: a result, not a crash
            log(f"  {exc}; counting the tasks that did not run as infinitely late")
        late_ms = sorted(e.lateness * 1000 for e in run.executions() if e.lateness is not None)
        return late_ms + [math.inf] * max(0, self.tasks - len(late_ms))

    def _limit(self, run: Run) -> list[float]:
        """The same stream on the same workers, each task published at its due time
        without an ETA (by the same publisher processes, pacing themselves)."""
        wait_until(lambda: run.queued() == 0, timeout=GRACE_SECONDS, what="the queue drained")
        run.client.delete(run.config.results_key)
        first_due = time.time() + 2.0  # the publisher processes start meanwhile
        sends: list[Send] = [(first_due + i / self.rate, None) for i in range(self.tasks)]
        log(f"  the limit: publishing {self.tasks:,} tasks at their due times")
        publish_parallel(run.config, sends, PUBLISHERS)
        return self._lateness(run, first_due)

    def plot(self, directory: Path) -> list[Path]:
        drawn = plots.cdf(
            directory / "lateness_stream.png",
            {
                side: [max(v, 0.01) for v in values if v != math.inf]
                for side, values in self.samples.items()
            },
            title=f"Task start - ETA, {self.rate:,.0f} tasks/s falling due",
            xlabel="lateness (ms, log; values below 0.01 ms shown at 0.01)",
            vline=(TARGET_P99_MS, "target p99 (50 ms)"),
        )
        return [drawn] if drawn else []


class QueuePeak:
    """The longest the run's queue lists get, sampled every 0.1 s in a thread: messages
    delivered but not yet taken by a worker (for delayq, the store has done its part)."""

    def __init__(self, run: Run) -> None:
        self.value = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(run,), daemon=True)
        self._thread.start()

    def _sample(self, run: Run) -> None:
        while not self._done.wait(0.1):
            self.value = max(self.value, run.queued())

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
