"""``python -m benchmarks.periodic_cost [--quick] [--output PATH]``: what 10,000 periodic
entries cost, celery-delayq (``-S delayq``) against Celery's ``PersistentScheduler``.

One side after the other, each on a fresh private redis-server with no worker: one
``celery beat`` with the same 10,000 interval entries (every 60 s) in ``beat_schedule``
(benchmarks/periodic_app.py). Read: how long the beat takes to be ready (celery-delayq:
every entry synced into the store and its occurrences written ahead, ``delayq_periodic_horizon``
ahead; Celery: its scheduler set up, every entry loaded) and the CPU seconds that took;
what its schedule keeps (celery-delayq: Redis ``used_memory`` grown, entries and
written-ahead occurrences; Celery: the schedule file); then, over a window longer than one
interval, the beat's CPU seconds, the tasks that reached the queue (celery-delayq's beat
moves the due occurrences itself, as no worker runs) and Redis's own time
(``INFO commandstats``). Writes benchmarks/RESULTS-periodic-cost.md on a full run.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import redis

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import (
    RedisServer,
    build_app,
    celery_command,
    kombu_lists,
    spawn,
    stop_group,
    wait_until,
)

from .harness import log
from .periodic_app import ENV, QUEUE, READY_KEY, settings
from .processes import MIB, REPO_ROOT, cpu_seconds
from .report import environment
from .standalone import parse_options, publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-periodic-cost.md"
APP = "benchmarks.periodic_app"


@dataclass(frozen=True)
class Size:
    entries: int
    every: float  # each entry's interval (seconds)
    window: float  # seconds of steady running measured, longer than ``every``


FULL = Size(entries=10_000, every=60.0, window=90.0)
QUICK = Size(entries=500, every=10.0, window=15.0)


@dataclass(frozen=True)
class Reading:
    ready_seconds: float
    ready_cpu: float
    state_bytes: int  # Redis memory grown (delayq) or the schedule file (Celery)
    ahead: int  # occurrences written ahead
    window_cpu: float
    delivered: int  # tasks in the queue at the end of the window
    redis_us: float  # Redis's time running commands during the window


def redis_usec(client: redis.Redis) -> float:
    return float(sum(stat["usec"] for stat in client.info("commandstats").values()))


def queued(client: redis.Redis) -> int:
    return sum(int(client.llen(name)) for name in kombu_lists(QUEUE))


def measure(scheduler: str, size: Size, directory: Path) -> Reading:
    """One beat of ``scheduler`` (``persistent`` or ``delayq``) with ``size``'s entries."""
    schedule_file = directory / f"schedule-{scheduler}"
    options = (
        ["-S", "delayq"]
        if scheduler == "delayq"
        else ["-S", "celery.beat:PersistentScheduler", "-s", str(schedule_file)]
    )
    with RedisServer() as server:
        client = server.client()
        config: dict[str, Any] = {
            "scheduler": scheduler,
            "broker_url": server.url,
            "entries": size.entries,
            "every": size.every,
        }
        app = build_app("cost", settings(**config))
        memory_before = int(client.info("memory")["used_memory"])
        started = time.time()
        beat = spawn(
            celery_command(APP, "beat", *options, "--pidfile=", "-l", "WARNING"),
            {**os.environ, ENV: json.dumps(config)},
            directory / f"beat-{scheduler}.log",
            root=REPO_ROOT,
        )
        try:
            process = psutil.Process(beat.pid)
            ready = ready_check(scheduler, size, app, client)
            wait_until(
                ready,
                timeout=600,
                interval=0.2,
                what=f"the {scheduler} beat is ready",
                abort=lambda: None if beat.poll() is None else "the beat exited",
            )
            ready_seconds, ready_cpu = time.time() - started, cpu_seconds(process)
            grown = int(client.info("memory")["used_memory"]) - memory_before
            ahead = pending(app) if scheduler == "delayq" else 0
            log(f"{scheduler}: ready in {ready_seconds:.1f} s; measuring {size.window:g} s")
            usec_before = redis_usec(client)
            time.sleep(size.window)
            window_cpu = cpu_seconds(process) - ready_cpu
            usec = redis_usec(client) - usec_before
            delivered = queued(client)
        finally:
            stop_group(beat, 30)  # Celery's beat saves its schedule file as it stops
            app.close()
    state = grown if scheduler == "delayq" else schedule_file_bytes(schedule_file)
    return Reading(ready_seconds, ready_cpu, state, ahead, window_cpu, delivered, usec)


def ready_check(scheduler: str, size: Size, app: Any, client: redis.Redis) -> Callable[[], bool]:
    """celery-delayq: every entry has its mark (written ahead); Celery: its scheduler is
    set up, every entry loaded (``beat_init``)."""
    if scheduler == "delayq":
        with open_store(app) as store:
            marks = store.keys.for_queue(QUEUE).periodic_marks
        return lambda: client.hlen(marks) >= size.entries
    return lambda: client.scard(READY_KEY) > 0


def schedule_file_bytes(path: Path) -> int:
    """The size of Celery's shelve (dbm may add a suffix to the name)."""
    return sum(each.stat().st_size for each in path.parent.glob(path.name + "*"))


def pending(app: Any) -> int:
    from celery_delayq import backlog

    return sum(entry.pending for entry in backlog(app))


def ratio(delayq: float, vanilla: float) -> str:
    return f"{delayq / vanilla:.3g}x" if vanilla else "n/a"


def render(readings: dict[str, Reading], size: Size, took: float, command: str) -> str:
    vanilla, delayq = readings["persistent"], readings["delayq"]
    rows: list[tuple[str, float, float, int]] = [
        ("seconds until ready", vanilla.ready_seconds, delayq.ready_seconds, 1),
        ("beat CPU until ready (s)", vanilla.ready_cpu, delayq.ready_cpu, 2),
        (
            "schedule state (MiB): Redis memory grown (delayq), schedule file (Celery)",
            vanilla.state_bytes / MIB,
            delayq.state_bytes / MIB,
            2,
        ),
        (
            "schedule state per entry (bytes)",
            vanilla.state_bytes / size.entries,
            delayq.state_bytes / size.entries,
            0,
        ),
        ("occurrences written ahead", vanilla.ahead, delayq.ahead, 0),
        (f"beat CPU over {size.window:g} s (s)", vanilla.window_cpu, delayq.window_cpu, 2),
        (f"tasks in the queue after {size.window:g} s", vanilla.delivered, delayq.delivered, 0),
        (
            f"Redis time running commands over {size.window:g} s (ms)",
            vanilla.redis_us / 1000,
            delayq.redis_us / 1000,
            1,
        ),
    ]
    lines = [
        "# What periodic entries cost: celery-delayq against Celery's PersistentScheduler",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"({took:.0f} s in total).  ",
        f"{environment()}.",
        "",
        f"One `celery beat` with {size.entries:,} interval entries (every {size.every:g} s), "
        "no worker, a fresh private redis-server per side, one side after the other. "
        "celery-delayq writes each entry's occurrences ahead (`delayq_periodic_horizon`, "
        "default 300 s) and its beat's mover moves the due ones to the queue (no worker "
        "runs one); Celery sends each due entry itself. Every entry falls due once in the "
        f"window (its first occurrence, one interval after the beat made or loaded it): "
        f"{size.entries:,} tasks due on each side.",
        "",
        "| metric | Celery `PersistentScheduler` | celery-delayq | delayq / Celery |",
        "|---|---:|---:|---:|",
        *(
            f"| {label} | {a:,.{digits}f} | {b:,.{digits}f} | {ratio(b, a)} |"
            for label, a, b, digits in rows
        ),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    options = parse_options(__doc__)
    size = QUICK if options.quick else FULL
    directory = Path(tempfile.mkdtemp(prefix="delayq-periodic-cost-"))
    log(f"logs in {directory}")
    started = time.time()
    readings = {side: measure(side, size, directory) for side in ("persistent", "delayq")}
    command = "python -m benchmarks.periodic_cost" + (" --quick" if options.quick else "")
    publish(render(readings, size, time.time() - started, command), options, DEFAULT_OUTPUT)


if __name__ == "__main__":
    main()
