"""Scenario 5: what celery-delayq costs the publisher.

``apply_async(countdown=3600)`` in one process with no worker running: vanilla
LPUSHes the message, delayq runs ``schedule.lua`` instead. The best of several
rounds is taken on each side (the least disturbed by the rest of the machine).
For delayq the physical limit is measured too: the same script, called in a tight
pipelined loop with no Celery around it, from one process (bounded by building
the calls in Python), and the Redis time one call takes (bounding what any number
of publishers can reach on one Redis).
"""

from __future__ import annotations

import time
from typing import Any

from ..harness import Run
from ..report import MetricSpec, Target
from ..store_tools import fill, make_store

COUNTDOWN = 3600.0
ROUNDS = 3
TARGET_RATIO = 0.95


class ProducerCost:
    key = "producer"

    def __init__(self, tasks: int, script_calls: int) -> None:
        self.tasks = tasks
        self.script_calls = script_calls

    @property
    def title(self) -> str:
        return (
            f"5. Producer, {self.tasks:,} x apply_async(countdown=3600) in one process, "
            f"best of {ROUNDS}"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec(
                "rate",
                "apply_async throughput (tasks/s)",
                "",
                Target(f"ratio >= {TARGET_RATIO}", lambda r: r >= TARGET_RATIO),
                digits=0,
                on_ratio=True,
            ),
            MetricSpec("per_task", "time per apply_async", "us"),
            MetricSpec(
                "script_us", "schedule.lua Redis time per call (commandstats)", "us", digits=2
            ),
            MetricSpec(
                "script_rate",
                f"schedule.lua pipelined, no Celery, {self.script_calls:,} calls (calls/s)",
                "",
                digits=0,
            ),
        )

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        run.publish([COUNTDOWN] * 100)  # warm up: connection, script load, imports
        best = 0.0
        for _ in range(ROUNDS):
            began = time.perf_counter()
            run.publish([COUNTDOWN] * self.tasks)
            best = max(best, self.tasks / (time.perf_counter() - began))
        values: dict[str, float | None] = {"rate": best, "per_task": 1e6 / best}
        if run.config.delayq:
            store = make_store(run.config.broker_url)
            run.client.config_resetstat()
            # increasing due times over an hour, as a countdown stream gives them (all in
            # one ms would be a flood: one page that can never be split)
            seconds = fill(
                store, f"{run.config.queue}.raw", self.script_calls, 2**41, spread_ms=3_600_000
            )
            values["script_rate"] = self.script_calls / seconds
            evalsha = run.client.info("commandstats").get("cmdstat_evalsha", {})
            values["script_us"] = evalsha.get("usec_per_call")
        return values
