"""Scenario 3e: a hot instant, many tasks published back to back with one ETA.

Two solo workers (prefetch 4) consume; ``tasks`` tasks are published with one shared
ETA ``lead`` seconds out, so lateness (each task's start minus that ETA, as the task
records it) counts from the instant they are all due. Vanilla's workers hold every
message by then and start them back to back; celery-delayq's fetch them when the mover
hands them over, which for a dense instant is ahead in proportion to its size
(``delayq_burst_ahead``), so that they too hold it by the ETA. Each size runs in turn on
one pair of workers; the sides alternate round by round (``rounds``; the runner
interleaves them), and each side's best round by p99 is reported, so a busy spell on a
shared machine does not land on one side only. Never early: the min row is the
earliest start, which must not be before the ETA.
"""

from __future__ import annotations

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
            f"3e. Hot instant, {sizes} tasks published back to back with one ETA "
            f"{self.lead:g} s out, {WORKERS} solo workers, best of {self.rounds}"
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
                MetricSpec(f"min_{n}", f"{n:,} tasks: lateness min", "ms", never_early),
            ]
        return tuple(rows)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(WORKERS)
        values: dict[str, float | None] = {}
        for n in self.sizes:
            late_ms = self._instant(run, n)
            values.update({f"{k}_{n}": v for k, v in lateness_values(late_ms).items()})
            values[f"min_{n}"] = late_ms[0]
        return values

    def _instant(self, run: Run, tasks: int) -> list[float]:
        """Lateness (ms) of ``tasks`` tasks sharing one ETA, sorted."""
        task = run.app.tasks[RECORD_TASK]
        done = run.execution_count()
        lead = self.lead + tasks * PUBLISH_SECONDS_PER_TASK
        eta = datetime.now(timezone.utc) + timedelta(seconds=lead)
        with run.app.producer_or_acquire() as producer:
            for _ in range(tasks):
                task.apply_async(eta=eta, producer=producer)
        if datetime.now(timezone.utc) >= eta:
            raise RuntimeError(f"publishing {tasks} tasks took longer than {lead:.1f} s")
        wait_until(
            lambda: run.execution_count() >= done + tasks,
            timeout=lead + 120,
            what=f"{tasks} tasks ran",
            interval=0.1,
        )
        executions = run.executions()[done:]
        late_ms = sorted(e.lateness * 1000 for e in executions if e.lateness is not None)
        log(f"    {tasks} tasks: p99 {lateness_values(late_ms)['p99']:.1f} ms")
        return late_ms

    def best(self, rounds: list[dict[str, float | None]]) -> dict[str, float | None]:
        """Per size, the values of the round with the lowest p99."""
        best: dict[str, float | None] = {}
        for n in self.sizes:
            chosen = min(rounds, key=lambda r: r.get(f"p99_{n}") or float("inf"))
            best.update({k: v for k, v in chosen.items() if k.endswith(f"_{n}")})
        return best
