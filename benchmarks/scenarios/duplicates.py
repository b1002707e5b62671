"""Scenario 2: countdown longer than the broker's visibility timeout, two workers.

Vanilla kombu restores a message that stayed unacknowledged longer than
``visibility_timeout`` to its queue although a worker still holds it for its ETA,
so another worker (or the same) receives it again and the task runs several times.
celery-delayq delivers a message only when it is due, so each task runs once.

kombu scans for such messages only every ``unacked_restore_interval`` x
``unacked_restore_throttle`` seconds (10 x 10 by default in kombu 5.7); both sides
use 1 x 1 here, so the effect shows within the scenario's short countdown instead
of after minutes. The options are identical for both sides.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery_delayq.testing import wait_until_quiescent

from ..harness import Run, log
from ..report import MetricSpec, Target
from ..runconfig import restoring_every_second


class Duplicates:
    key = "duplicates"

    def __init__(self, tasks: int, countdown: float, visibility_timeout: float) -> None:
        self.tasks = tasks
        self.countdown = countdown
        self.visibility_timeout = visibility_timeout

    @property
    def title(self) -> str:
        return (
            f"2. Duplicates, {self.tasks} tasks, countdown={self.countdown:g}s > "
            f"visibility_timeout={self.visibility_timeout:g}s, 2 workers"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        exactly = Target(f"= {self.tasks}", lambda v: v == self.tasks)
        return (
            MetricSpec("executions", "executions", "", exactly, digits=0),
            MetricSpec("distinct", "distinct tasks executed", "", exactly, digits=0),
            MetricSpec("max_runs", "most runs of one task", "", Target("= 1", lambda v: v == 1), 0),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return restoring_every_second(self.visibility_timeout)

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(2)
        run.publish([self.countdown] * self.tasks)
        log(f"  {self.tasks} tasks sent; waiting until nothing is left to run")
        # Nothing delayed, queued, unacked (kombu restores those) or held by a worker:
        # every copy that will ever run has run.
        wait_until_quiescent(
            run.app,
            workers=2,
            queues=[run.config.queue],
            timeout=self.countdown + 60 + 4 * self.visibility_timeout,
        )
        runs = Counter(execution.task_id for execution in run.executions())
        return {
            "executions": float(sum(runs.values())),
            "distinct": float(len(runs)),
            "max_runs": float(max(runs.values(), default=0)),
        }
