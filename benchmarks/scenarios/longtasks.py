"""Scenario 8: acks_late tasks that run longer than the broker's visibility timeout.

kombu restores a message left unacknowledged longer than ``visibility_timeout`` even
while a live worker still runs its task, so another worker starts it again (and again,
each time the timeout runs out). celery-delayq's workers renew the leases of the
messages they hold (``delayq_reliable_consume``), so each task starts once. Two prefork
workers of one child each: the task runs in the child, the worker's loop renews.
Restores are looked for every second on both sides (kombu's default is 10 s x 10).
Counted once nothing is queued or unacknowledged and no task has started for a run's
length plus two visibility timeouts.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from celery_delayq.testing import wait_until

from ..app import HOLD_TASK
from ..harness import Run, log
from ..report import MetricSpec, Target
from ..runconfig import restoring_every_second


def wait_for_quiet(run: Run, quiet: float, timeout: float = 1200.0) -> None:
    """Until nothing is queued or unacknowledged and no task has started for ``quiet``
    seconds (a run plus two restores). Vanilla's reruns cascade (each 10 s run is
    restored again while it runs) and a vanilla worker may go on listing a request
    whose message another copy's ack already removed, so waiting until the workers
    hold nothing could last forever (a full run timed out so, after 220 s)."""
    seen, changed = -1, time.monotonic()

    def settled() -> bool:
        nonlocal seen, changed
        count = run.execution_count()
        if count != seen:
            seen, changed = count, time.monotonic()
        idle = run.queued() == 0 and run.unacked() == 0
        return idle and time.monotonic() - changed >= quiet

    wait_until(settled, timeout=timeout, interval=0.2, what="no task starts any more")


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
        log(f"  {self.tasks} long tasks sent; waiting until no task starts any more")
        wait_for_quiet(run, quiet=self.seconds + 2 * self.visibility_timeout + 5)
        runs = Counter(execution.task_id for execution in run.executions())
        return {
            "starts": sum(runs.values()) / max(len(runs), 1),
            "max_runs": float(max(runs.values(), default=0)),
        }
