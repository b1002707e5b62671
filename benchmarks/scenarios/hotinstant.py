"""Scenario 3e: a hot instant, many tasks published back to back with one ETA.

Two solo workers (prefetch 4) consume; ``tasks`` tasks are published back to back as
with one countdown (``lead`` seconds, plus time to publish them all) at 1,000 tasks/s:
task i's ETA is ``ETA_GAP`` (1 ms) after task i-1's, set explicitly, so both sides get the
same instant however fast this machine publishes (vanilla's workers take CPU from the
publisher while it publishes, which would spread its instant more). Lateness counts from
the first one's due instant: each task's start minus its own ETA (as the task records
it), plus its ETA's distance from the first. Vanilla's workers hold every
message by then and start them back to back; celery-delayq's fetch them when the mover
hands them over, which for a dense instant is ahead in proportion to its size
(``delayq_burst_ahead``), so that they too hold it by the ETA. Each size runs in turn on
one pair of workers; the sides alternate round by round (``rounds``; the runner
interleaves them), and each side's best round by p99 is reported, so a busy spell on a
shared machine does not land on one side only. Never early: the min row is the least
start minus own ETA, which must not be negative.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import Any

from celery_delayq.testing import wait_until

from ..app import RECORD_TASK
from ..harness import Run, log
from ..report import MetricSpec, Target
from .lateness import lateness_values

WORKERS = 2
#: The goal: p99 lateness at most this times vanilla's.
RATIO_TARGET = 1.1
#: Publishing may take this long per task on a slow machine; the ETA is further out.
PUBLISH_SECONDS_PER_TASK = 0.002
#: How long running may take per task: vanilla's kombu timer fires ten due entries per
#: event-loop turn, then sleeps up to a second (docs/explanation/benchmarks.md, "Tasks due
#: together"), so 5,000 tasks take it minutes on two workers.
RUN_SECONDS_PER_TASK = 0.1
#: Between two consecutive tasks' ETAs: publishing back to back at 1,000 tasks/s.
ETA_GAP = timedelta(milliseconds=1)


class HotInstant:
    key = "hotinstant"

    def __init__(self, sizes: tuple[int, ...], lead: float, rounds: int) -> None:
        self.sizes = sizes
        self.lead = lead
        #: The runner alternates the sides this many times and keeps each one's best.
        self.rounds = rounds

    @property
    def title(self) -> str:
        sizes = " and ".join(f"{n:,}" for n in self.sizes)
        return (
            f"3e. Hot instant, {sizes} tasks published back to back with one countdown "
            f"({self.lead:g} s; ETAs 1 ms apart), {WORKERS} solo workers, best of {self.rounds}"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        ratio = Target(f"<= {RATIO_TARGET:g}x vanilla", lambda v: v <= RATIO_TARGET)
        never_early = Target(">= 0 (never early)", lambda v: v >= 0)
        rows = []
        for n in self.sizes:
            rows += [
                MetricSpec(f"p50_{n}", f"{n:,} tasks: lateness p50", "ms"),
                MetricSpec(f"p99_{n}", f"{n:,} tasks: lateness p99", "ms", ratio, on_ratio=True),
                MetricSpec(f"max_{n}", f"{n:,} tasks: lateness max", "ms"),
                MetricSpec(f"min_{n}", f"{n:,} tasks: least start - own ETA", "ms", never_early),
                MetricSpec(f"own_p50_{n}", f"{n:,} tasks: start - own ETA, p50", "ms"),
                MetricSpec(f"own_p99_{n}", f"{n:,} tasks: start - own ETA, p99", "ms"),
            ]
        return tuple(rows)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(WORKERS)
        values: dict[str, float | None] = {}
        for n in self.sizes:
            late_ms, own_ms = self._instant(run, n)
            values.update({f"{k}_{n}": v for k, v in lateness_values(late_ms).items()})
            values.update({f"own_{k}_{n}": v for k, v in lateness_values(own_ms).items()})
            values[f"min_{n}"] = own_ms[0]
        return values

    def _instant(self, run: Run, tasks: int) -> tuple[list[float], list[float]]:
        """Lateness (ms) from the first one's due instant of ``tasks`` tasks published
        back to back with one countdown, and each one's start minus its own ETA (ms), both
        sorted."""
        task = run.app.tasks[RECORD_TASK]
        done = run.execution_count()
        countdown = timedelta(seconds=self.lead + tasks * PUBLISH_SECONDS_PER_TASK)
        etas: dict[str, float] = {}  # task id -> its ETA (epoch s)
        start = datetime.now(timezone.utc) + countdown
        with run.app.producer_or_acquire() as producer:
            for i in range(tasks):
                eta = start + i * ETA_GAP
                etas[task.apply_async(eta=eta, producer=producer).id] = eta.timestamp()
        first = min(etas.values())
        if time.time() >= first:
            raise RuntimeError(f"publishing {tasks} tasks took longer than {countdown}")
        wait_until(
            lambda: run.execution_count() >= done + tasks,
            timeout=countdown.total_seconds() + 60 + tasks * RUN_SECONDS_PER_TASK,
            what=f"{tasks} tasks ran",
            interval=0.1,
        )
        executions = run.executions()[done:]
        late_ms = sorted(
            (e.lateness + etas[e.task_id] - first) * 1000
            for e in executions
            if e.lateness is not None
        )
        log(f"    {tasks} tasks: p99 {lateness_values(late_ms)['p99']:.1f} ms")
        own_ms = sorted(e.lateness * 1000 for e in executions if e.lateness is not None)
        return late_ms, own_ms

    def best(self, rounds: list[dict[str, float | None]]) -> dict[str, float | None]:
        """Per size, the values of the round with the lowest p99."""
        best: dict[str, float | None] = {}
        for n in self.sizes:
            chosen = min(rounds, key=lambda r: r.get(f"p99_{n}") or float("inf"))
            best.update({k: v for k, v in chosen.items() if k.endswith(f"_{n}")})
        return best
