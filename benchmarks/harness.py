"""One benchmark session (a private Redis) and one run of one scenario on one side.

Each run gets a fresh queue name and starts from an empty Redis (``FLUSHALL``), so
kombu's global ``unacked`` hash or delayed messages left by a previous run can never
leak into the next one.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from celery import Celery

import celery_delayq
from celery_delayq.testing import kombu_lists

from .app import RECORD_TASK, make_app
from .processes import WorkerProcess
from .runconfig import RunConfig, Side

_started = time.monotonic()


def log(message: str) -> None:
    """Progress goes to stderr, so stdout carries only the results table."""
    print(f"[{time.monotonic() - _started:7.1f}s] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Execution:
    """One task execution as the task itself recorded it."""

    task_id: str
    lateness: float | None  # seconds after the message's own eta
    pid: int


class Run:
    """One scenario on one side: its config, publisher app, workers and readings."""

    def __init__(self, config: RunConfig, client: redis.Redis, log_dir: Path) -> None:
        self.config = config
        self.client = client
        self.log_dir = log_dir
        self.app: Celery = make_app(config)
        # celery-delayq's channel takes its settings from Celery's *current* app, not
        # from the app that owns the connection; with one app per run in this
        # process, make this run's app the current one before it publishes.
        self.app.set_current()
        self.workers: list[WorkerProcess] = []

    @property
    def side(self) -> Side:
        return self.config.side

    def start_workers(self, count: int, pool: str = "solo") -> list[WorkerProcess]:
        """Start ``count`` workers at once and wait until all of them consume."""
        new = [
            WorkerProcess(
                self.config, f"{self.config.queue}-w{len(self.workers) + i}", self.log_dir, pool
            )
            for i in range(count)
        ]
        self.workers.extend(new)
        for worker in new:
            worker.start()
        for worker in new:
            worker.wait_ready(self.client)
        return new

    def publish(self, countdowns: list[float]) -> float:
        """Send one task per countdown over one producer; returns the latest ETA (epoch s)."""
        task = self.app.tasks[RECORD_TASK]
        latest = 0.0
        with self.app.producer_or_acquire() as producer:
            for countdown in countdowns:
                latest = max(latest, time.time() + countdown)
                task.apply_async(countdown=countdown, producer=producer)
        return latest

    def executions(self) -> list[Execution]:
        raw = self.client.lrange(self.config.results_key, 0, -1)
        entries = [json.loads(item) for item in raw]
        return [Execution(e["id"], e["late"], e["pid"]) for e in entries]

    def execution_count(self) -> int:
        return int(self.client.llen(self.config.results_key))

    def queued(self) -> int:
        """Messages waiting in the kombu queue lists (all priorities)."""
        return sum(int(self.client.llen(key)) for key in kombu_lists(self.config.queue))

    def unacked(self) -> int:
        """Messages some worker fetched and has not acknowledged (kombu's ``unacked`` hash)."""
        return int(self.client.hlen("unacked"))

    def delayed(self) -> int:
        """Messages pending in celery-delayq's store for this queue (0 for vanilla)."""
        if not self.config.delayq:
            return 0
        return sum(
            b.pending for b in celery_delayq.backlog(self.app) if b.queue == self.config.queue
        )

    def redis_used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def close(self) -> None:
        try:
            for worker in self.workers:
                worker.stop()
        finally:
            self.app.close()


class Bench:
    """The session: one private Redis shared by all runs, and a directory for worker logs."""

    def __init__(self, redis_url: str, client: redis.Redis, log_dir: Path) -> None:
        self.redis_url = redis_url
        self.client = client
        self.log_dir = log_dir

    @contextmanager
    def run(self, scenario: str, side: Side, transport_options: dict[str, Any]) -> Iterator[Run]:
        """A clean Redis and a fresh queue for ``scenario`` on ``side``; workers stopped after."""
        self.client.flushall()
        token = uuid.uuid4().hex[:8]
        queue = f"bench.{scenario}.{side}.{token}"
        config = RunConfig(
            broker_url=self.redis_url,
            side=side,
            queue=queue,
            results_key=f"{queue}:executions",
            ready_key=f"{queue}:ready",
            transport_options=transport_options,
        )
        run = Run(config, self.client, self.log_dir)
        try:
            yield run
        finally:
            run.close()
