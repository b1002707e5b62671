"""Scenario 1: what pending countdown tasks cost a worker's memory.

Vanilla Celery delivers an ETA message at once and the worker keeps it (request
object, timer entry, unacked bookkeeping) until it is due; celery-delayq keeps it
in Redis, so the worker should not grow at all. Redis memory is reported too,
because with celery-delayq that is where the pending tasks now live.
"""

from __future__ import annotations

from typing import Any

from ..harness import Run, log, wait_until
from ..processes import MIB
from ..report import MetricSpec, Target

COUNTDOWN = 3600.0


class WorkerMemory:
    key = "memory"

    def __init__(self, tasks: int) -> None:
        self.tasks = tasks

    @property
    def title(self) -> str:
        return f"1. Worker memory, {self.tasks:,} tasks pending (countdown=3600)"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec(
                "rss_growth", "worker RSS growth", "MiB", Target("< 5 MiB", lambda v: v < 5)
            ),
            MetricSpec("per_task", "worker RSS growth per pending task", "KiB", digits=2),
            MetricSpec("held", "messages held by the worker (unacked)", "", digits=0),
            MetricSpec("redis_growth", "Redis used_memory growth", "MiB"),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}  # kombu's defaults (visibility_timeout 3600 s): no redelivery here

    def measure(self, run: Run) -> dict[str, float | None]:
        [worker] = run.start_workers(1)
        idle_rss = worker.settled_rss()
        redis_before = run.redis_used_memory()
        log(f"  idle RSS {idle_rss / MIB:.1f} MiB; publishing {self.tasks:,} tasks")
        run.publish([COUNTDOWN] * self.tasks)

        timeout = 60 + self.tasks / 100
        if run.config.delayq:
            wait_until(
                lambda: run.delayed() >= self.tasks,
                timeout=timeout,
                what=f"{self.tasks} tasks are pending in the delayed store",
            )
        else:
            # The worker has received every message once the list is drained and
            # each message sits in kombu's unacked hash (written just before the
            # worker's own callback runs).
            wait_until(
                lambda: run.queued() == 0 and run.unacked() >= self.tasks,
                timeout=timeout,
                what=f"the worker has received all {self.tasks} tasks",
                interval=0.25,
            )
        loaded_rss = worker.settled_rss()
        growth = loaded_rss - idle_rss
        return {
            "rss_growth": growth / MIB,
            "per_task": growth / self.tasks / 1024,
            "held": float(run.unacked()),
            "redis_growth": (run.redis_used_memory() - redis_before) / MIB,
        }
