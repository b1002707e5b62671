"""Scenario 8: acks_late tasks that run longer than the broker's visibility timeout.

kombu restores a message left unacknowledged longer than ``visibility_timeout`` even
while a live worker still runs its task, so another worker starts it again (and again,
each time the timeout runs out). celery-delayq's workers renew the leases of the
messages they hold (``delayq_reliable_consume``), so each task starts once. Two prefork
workers of one child each: the task runs in the child, the worker's loop renews.
Restores are looked for every second on both sides (kombu's default is 10 s x 10).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from celery_delayq.testing import wait_until_quiescent

from ..app import HOLD_TASK
from ..harness import Run, log
from ..report import MetricSpec, Target
from ..runconfig import restoring_every_second


class LongTasks:
    key = "longtasks"

    def __init__(self, tasks: int, seconds: float, visibility_timeout: float) -> None:
        self.tasks = tasks
        self.seconds = seconds
        self.visibility_timeout = visibility_timeout

    @property
    def title(self) -> str:
        return (
            f"8. Long tasks: {self.tasks} acks_late tasks of {self.seconds:g} s, "
            f"visibility_timeout={self.visibility_timeout:g}s, 2 prefork workers"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec("starts", "starts per task", "", Target("= 1", lambda v: v == 1), digits=2),
            MetricSpec(
                "max_runs", "most starts of one task", "", Target("= 1", lambda v: v == 1), 0
            ),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return restoring_every_second(self.visibility_timeout)

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(2, pool="prefork")
        task = run.app.tasks[HOLD_TASK]
        with run.app.producer_or_acquire() as producer:
            for _ in range(self.tasks):
                task.apply_async(kwargs={"seconds": self.seconds}, producer=producer)
        log(f"  {self.tasks} long tasks sent; waiting until nothing is left to run")
        wait_until_quiescent(
            run.app,
            workers=2,
            queues=[run.config.queue],
            timeout=self.tasks * self.seconds * 4 + 60,
        )
        runs = Counter(execution.task_id for execution in run.executions())
        return {
            "starts": sum(runs.values()) / max(len(runs), 1),
            "max_runs": float(max(runs.values(), default=0)),
        }
