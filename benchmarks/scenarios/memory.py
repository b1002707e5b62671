"""Scenario 1: what pending countdown tasks cost a worker's memory, by backlog size.

Vanilla Celery delivers an ETA message at once and the worker keeps it (request
object, timer entry, unacked bookkeeping) until it is due; celery-delayq keeps it
in Redis, so the worker should not grow at all. One worker is loaded step by step
(1k, then 10k, then 100k pending) and its settled RSS read after each step, so the
growth curve costs one publish of the largest backlog. Redis memory is reported
too, because with celery-delayq that is where the pending tasks now live.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from celery_delayq.testing import wait_until

from .. import plots
from ..harness import Run, log
from ..processes import MIB
from ..publishers import publish_parallel
from ..report import MetricSpec, Target
from ..runconfig import Side

COUNTDOWN = 3600.0
PUBLISHERS = 2
#: The target: worker RSS growth per 100,000 pending tasks (delayq).
TARGET_MIB_PER_100K = 1.0


class WorkerMemory:
    key = "memory"

    def __init__(self, backlogs: tuple[int, ...], vanilla_max: int) -> None:
        self.backlogs = backlogs
        #: Vanilla stops at this backlog (it holds ~9 KB per task and receives slowly).
        self.vanilla_max = vanilla_max
        self.curves: dict[Side, tuple[list[float], list[float]]] = {}

    @property
    def title(self) -> str:
        sizes = ", ".join(f"{b:,}" for b in self.backlogs)
        return f"1. Worker memory, {sizes} tasks pending (countdown=3600)"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        per_backlog = tuple(
            MetricSpec(f"rss_{b}", f"worker RSS growth, {b:,} pending", "MiB", digits=2)
            for b in self.backlogs
        )
        largest = self.backlogs[-1]
        return (
            *per_backlog,
            MetricSpec(
                "per_100k",
                f"worker RSS growth per 100,000 pending (at {largest:,})",
                "MiB",
                Target(f"< {TARGET_MIB_PER_100K:g} MiB", lambda v: v < TARGET_MIB_PER_100K),
                digits=2,
            ),
            MetricSpec("held", f"messages held by the worker at {largest:,}", "", digits=0),
            MetricSpec("redis_growth", f"Redis used_memory growth at {largest:,}", "MiB"),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}  # kombu's defaults (visibility_timeout 3600 s): no redelivery here

    def measure(self, run: Run) -> dict[str, float | None]:
        [worker] = run.start_workers(1)
        idle_rss = worker.settled_rss()
        redis_before = run.redis_used_memory()
        log(f"  idle RSS {idle_rss / MIB:.1f} MiB")
        values: dict[str, float | None] = {}
        xs: list[float] = []
        ys: list[float] = []
        published = 0
        for backlog in self.backlogs:
            if not run.config.delayq and backlog > self.vanilla_max:
                log(f"  vanilla capped at {self.vanilla_max:,} pending: {backlog:,} not measured")
                break
            self._publish(run, backlog - published)
            published = backlog
            self._wait_pending(run, backlog)
            growth = (worker.settled_rss() - idle_rss) / MIB
            log(f"  {backlog:,} pending: RSS +{growth:.2f} MiB")
            values[f"rss_{backlog}"] = growth
            xs.append(backlog)
            ys.append(growth)
        self.curves[run.side] = (xs, ys)
        if published == self.backlogs[-1]:
            values["per_100k"] = values[f"rss_{published}"] * 100_000 / published  # type: ignore[operator]
            values["held"] = float(run.unacked())
            values["redis_growth"] = (run.redis_used_memory() - redis_before) / MIB
        return values

    @staticmethod
    def _publish(run: Run, count: int) -> None:
        if count <= 2_000:
            run.publish([COUNTDOWN] * count)
            return
        eta = time.time() + COUNTDOWN
        publish_parallel(run.config, [(0.0, eta)] * count, PUBLISHERS)

    @staticmethod
    def _wait_pending(run: Run, count: int) -> None:
        timeout = 60 + count / 200
        if run.config.delayq:
            wait_until(
                lambda: run.delayed() >= count,
                timeout=timeout,
                what=f"{count} tasks are pending in the delayed store",
                interval=0.1,  # polls lightly: Redis is part of what is measured
            )
        else:
            # The worker has received every message once the list is drained and
            # each message sits in kombu's unacked hash (written just before the
            # worker's own callback runs).
            wait_until(
                lambda: run.queued() == 0 and run.unacked() >= count,
                timeout=timeout,
                what=f"the worker has received all {count} tasks",
                interval=0.25,
            )

    def plot(self, directory: Path) -> list[Path]:
        drawn = plots.lines(
            directory / "memory.png",
            self.curves,
            title="Worker RSS growth vs pending countdown=3600 tasks",
            xlabel="tasks pending (log)",
            ylabel="worker RSS growth (MiB, symlog)",
            logx=True,
            logy=True,
        )
        return [drawn] if drawn else []
