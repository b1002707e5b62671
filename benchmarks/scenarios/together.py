"""Scenario 3d: many tasks due at the same moment, on two solo workers.

Rounds of ``tasks`` tasks share one ETA, a few seconds out. Vanilla's workers hold every
message in their timers by then and start them back to back; celery-delayq's workers
fetch them when the mover hands them over (``delayq_move_ahead`` before the ETA), so
what is measured is whether the hand-over and the fetches keep up with the workers.
Lateness is what each task records (start - ETA), over every round.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from celery_delayq.testing import wait_until

from ..app import RECORD_TASK
from ..harness import Run
from ..report import MetricSpec
from .lateness import lateness_specs, lateness_values

WORKERS = 2
#: Seconds from publishing a round to its ETA: every message is stored (or held) by then.
LEAD = 2.0


class DueTogether:
    key = "together"

    def __init__(self, tasks: int, rounds: int) -> None:
        self.tasks = tasks
        self.rounds = rounds

    @property
    def title(self) -> str:
        return (
            f"3d. Lateness, {self.tasks} tasks due in the same ms, {WORKERS} solo workers, "
            f"{self.rounds} rounds"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            *lateness_specs(),
            MetricSpec("executed", "executions", "", digits=0),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.start_workers(WORKERS)
        task = run.app.tasks[RECORD_TASK]
        for round_number in range(1, self.rounds + 1):
            eta = datetime.now(timezone.utc) + timedelta(seconds=LEAD)
            with run.app.producer_or_acquire() as producer:
                for _ in range(self.tasks):
                    task.apply_async(eta=eta, producer=producer)
            wait_until(
                lambda n=round_number: run.execution_count() >= n * self.tasks,
                timeout=LEAD + 60,
                what=f"round {round_number} ran",
                interval=0.1,
            )
        late_ms = sorted(e.lateness * 1000 for e in run.executions() if e.lateness is not None)
        return {**lateness_values(late_ms), "executed": float(len(late_ms))}
