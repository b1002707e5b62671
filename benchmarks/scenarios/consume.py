"""Scenario 9: consume throughput, and what each consumed message costs Redis.

N tiny tasks wait in the queue before one solo worker starts; the clock runs from the
moment the worker is ready until the N-th task has run. Vanilla consumes with kombu's
BRPOP and records each message in a second round trip; celery-delayq takes and records
it in one script call (consume.lua). Both with acks early (``bench.record``) and late
(``bench.record_late``). The queue is filled with copies of one real Celery message
(new ids), pushed in pipelined batches, so filling costs the same on both sides and is
not timed.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import redis

from ..app import RECORD_LATE_TASK, RECORD_TASK
from ..harness import Run, log
from ..processes import redis_cpu_seconds
from ..report import MetricSpec, Target

MODES = (("early", RECORD_TASK), ("late", RECORD_LATE_TASK))
#: Commands the scenario itself sends while it watches (polling, statistics).
OWN_COMMANDS = ("info", "llen", "config|resetstat")


class Consume:
    key = "consume"

    def __init__(self, tasks: int) -> None:
        self.tasks = tasks

    @property
    def title(self) -> str:
        return f"9. Consume: {self.tasks:,} queued tiny tasks, one solo worker"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        specs = []
        for mode, _ in MODES:
            acks = "acks_late" if mode == "late" else "acks early"
            specs += [
                MetricSpec(
                    f"rate_{mode}",
                    f"tasks consumed per second, {acks}",
                    "/s",
                    Target("ratio >= 0.9", lambda r: r >= 0.9),
                    digits=0,
                    on_ratio=True,
                ),
                MetricSpec(f"commands_{mode}", f"Redis commands per task, {acks}", "", digits=2),
                MetricSpec(f"cpu_{mode}", f"Redis CPU per task, {acks}", "µs", digits=1),
            ]
        return tuple(specs)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for mode, task_name in MODES:
            fill(run, task_name, self.tasks)
            run.client.config_resetstat()
            cpu_before = redis_cpu_seconds(run.client)
            (worker,) = run.start_workers(1)
            started = time.monotonic()
            while run.execution_count() < self.tasks:
                time.sleep(0.02)
            seconds = time.monotonic() - started
            cpu = redis_cpu_seconds(run.client) - cpu_before
            ran = commands_run(run.client)
            commands = sum(ran.values()) - self.tasks  # each task's own RPUSH left out
            worker.stop()
            run.client.delete(run.config.results_key)
            per_task = top(ran, self.tasks)
            log(f"  {mode}: {self.tasks:,} tasks in {seconds:.1f} s; per task: {per_task}")
            values[f"rate_{mode}"] = self.tasks / seconds
            values[f"commands_{mode}"] = commands / self.tasks
            values[f"cpu_{mode}"] = cpu / self.tasks * 1e6
        return values


def fill(run: Run, task_name: str, count: int) -> None:
    """Queue ``count`` copies of one real message of ``task_name``, each with new ids."""
    run.app.tasks[task_name].apply_async()
    queue = run.config.queue
    template = json.loads(run.client.rpop(queue))
    batch = 2_000
    for start in range(0, count, batch):
        with run.client.pipeline(transaction=False) as pipe:
            copies = [copy_of(template) for _ in range(min(batch, count - start))]
            pipe.lpush(queue, *copies)
            pipe.execute()


def copy_of(template: dict[str, Any]) -> str:
    task_id = str(uuid.uuid4())
    template["headers"]["id"] = template["headers"]["root_id"] = task_id
    template["properties"]["correlation_id"] = task_id
    template["properties"]["delivery_tag"] = str(uuid.uuid4())
    return json.dumps(template)


def commands_run(client: redis.Redis) -> dict[str, int]:
    """Calls of each command Redis ran since the statistics were reset (a script call
    counts once, and so does each command it runs), the scenario's own left out."""
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}
    return {name: n for name, n in calls.items() if name not in OWN_COMMANDS}


def top(calls: dict[str, int], tasks: int) -> str:
    """The most frequent commands, per task."""
    ranked = sorted(calls.items(), key=lambda item: -item[1])[:8]
    return ", ".join(f"{name} {n / tasks:.2f}" for name, n in ranked)
