"""Scenario 3: how late a countdown task starts, measured by the task itself.

Each task records ``time.time()`` minus its own ``eta`` header on entry. Vanilla
holds the message on the worker's timer; celery-delayq adds the mover (woken for the
next due time), the LPUSH and the worker's BRPOP before that same timer path.
"""

from __future__ import annotations

import math
import random
from typing import Any

from celery_delayq.testing import wait_until

from ..harness import Run
from ..report import MetricSpec, Target
from ..store_tools import move_lateness, mover_passes, pass_rate

SEED = 20240601
#: Seconds the idle pass rate is first read over (the mover sleeps up to mover_max_sleep).
IDLE_WINDOW = 6.0


def percentile(sorted_values: list[float], pct: float) -> float:
    """Nearest-rank percentile: the smallest value with at least ``pct`` % at or below it."""
    rank = max(1, math.ceil(pct / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def lateness_specs(p99_target: Target | None = None) -> tuple[MetricSpec, ...]:
    """The p50, p99 and max rows every lateness scenario has (``lateness_values``)."""
    return (
        MetricSpec("p50", "lateness p50", "ms"),
        MetricSpec("p99", "lateness p99", "ms", p99_target),
        MetricSpec("max", "lateness max", "ms"),
    )


def lateness_values(sorted_ms: list[float]) -> dict[str, float | None]:
    return {
        "p50": percentile(sorted_ms, 50),
        "p99": percentile(sorted_ms, 99),
        "max": sorted_ms[-1],
    }


class Lateness:
    key = "lateness"

    def __init__(self, tasks: int, countdowns: tuple[float, float]) -> None:
        self.tasks = tasks
        self.low, self.high = countdowns

    @property
    def title(self) -> str:
        return (
            f"3. Lateness, {self.tasks} tasks, countdown {self.low:g}-{self.high:g}s, idle worker"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            *lateness_specs(Target("< 50 ms", lambda v: v < 50)),
            MetricSpec("min", "lateness min (negative = early)", "ms"),
            MetricSpec("move_mean", "delayq move lateness mean (histogram)", "ms"),
            MetricSpec("passes", "delayq mover passes per second, while tasks fall due", "/s"),
            MetricSpec("idle_passes", "delayq mover passes per second, nothing due", "/s"),
            MetricSpec(
                "executed",
                "executions",
                "",
                Target(f"= {self.tasks}", lambda v: v == self.tasks),
                digits=0,
            ),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(1)
        rng = random.Random(SEED)  # the same countdowns for both sides
        countdowns = [rng.uniform(self.low, self.high) for _ in range(self.tasks)]
        if run.config.delayq:  # passes at idle: nothing pending yet
            idle_start = mover_passes(run.config.broker_url)
            wait_until(
                lambda: pass_rate(run.config.broker_url, idle_start) is not None,
                timeout=IDLE_WINDOW * 3,
                interval=IDLE_WINDOW,
            )
            idle_rate = pass_rate(run.config.broker_url, idle_start)
            busy_start = mover_passes(run.config.broker_url)
        run.publish(countdowns)
        wait_until(
            lambda: run.execution_count() >= self.tasks,
            timeout=self.high + 60,
            what=f"all {self.tasks} tasks ran",
            interval=0.1,  # polls lightly: Redis is part of what is measured
        )
        executions = run.executions()
        late_ms = sorted(e.lateness * 1000 for e in executions if e.lateness is not None)
        if len(late_ms) != len(executions):
            raise RuntimeError("a task ran without an eta header")
        values: dict[str, float | None] = {
            **lateness_values(late_ms),
            "min": late_ms[0],
            "executed": float(len(executions)),
        }
        if run.config.delayq:
            values["move_mean"] = move_lateness(run.config.broker_url, run.config.queue)[
                "move_mean"
            ]
            values["passes"] = pass_rate(run.config.broker_url, busy_start)
            values["idle_passes"] = idle_rate
        return values
