"""Scenario 10: how long a SIGKILLed worker's tasks wait before they run elsewhere.

One prefork worker takes ``held`` acks_late tasks (one running, the rest prefetched), a
second worker starts beside it, and the first is SIGKILLed with its pool. Its messages
stay in kombu's ``unacked`` hash until a live worker restores them, once they are older
than ``visibility_timeout``; the clock runs from the kill until the last of them has
started on the second worker. Each side runs with its own setting: vanilla with
kombu's default ``visibility_timeout`` (one hour: lower, and a task that runs longer runs
twice, scenario 8), celery-delayq with the recommended 60 s (leases let it be short).
Opt-in (``--scenario recovery``): with kombu's default the vanilla side takes over an
hour.
"""

from __future__ import annotations

import time
from typing import Any

from celery_delayq.testing import wait_until

from ..app import HOLD_FIRST_TASK
from ..harness import Run, log
from ..report import MetricSpec
from ..runconfig import Side


class Recovery:
    key = "recovery"

    def __init__(self, held: int, visibility: dict[Side, float | None], interval: float | None):
        self.held = held
        self.visibility = visibility
        self.interval = interval

    @property
    def title(self) -> str:
        shown = {
            side: "kombu's default, 3600" if value is None else f"{value:g}"
            for side, value in self.visibility.items()
        }
        return (
            f"10. Recovery: a SIGKILLed worker's {self.held} acks_late tasks (one running); "
            f"visibility_timeout {shown['vanilla']} s (vanilla) / {shown['delayq']} s (delayq)"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec("first", "first task running elsewhere, after the kill", "s"),
            MetricSpec("all", "all of them running elsewhere, after the kill", "s"),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def transport_options_for(self, side: Side) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.visibility[side] is not None:
            options["visibility_timeout"] = self.visibility[side]
        if self.interval is not None:
            options["unacked_restore_interval"] = self.interval
        return options

    def measure(self, run: Run) -> dict[str, float | None]:
        (victim,) = run.start_workers(1, pool="prefork")
        task = run.app.tasks[HOLD_FIRST_TASK]
        with run.app.producer_or_acquire() as producer:
            for _ in range(self.held):
                task.apply_async(kwargs={"seconds": 3600}, producer=producer)
        wait_until(lambda: run.unacked() == self.held, timeout=60, what="all taken")
        wait_until(lambda: run.execution_count() == 1, timeout=60, what="one started")
        run.start_workers(1)  # the survivor: a rerun ends at once (hold_first)
        killed = time.monotonic()
        victim.kill()
        log(f"  worker killed holding {self.held}; waiting for them to run elsewhere")
        timeout = (self.visibility[run.side] or 3600) * 2 + 300
        wait_until(lambda: run.execution_count() > 1, timeout=timeout, interval=0.05)
        first = time.monotonic() - killed
        wait_until(lambda: run.execution_count() == 1 + self.held, timeout=timeout, interval=0.05)
        return {"first": first, "all": time.monotonic() - killed}
