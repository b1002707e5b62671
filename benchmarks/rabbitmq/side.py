"""One side of a RabbitMQ scenario: its app, its worker subprocess, and what it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import redis
from celery import Celery

from celery_delayq.testing import spawn, stop_group, wait_until

from ..processes import REPO_ROOT
from .worker_app import READY_KEY, RUNS_KEY, make_app


class Side:
    """``name`` is vanilla, delayq or native (see worker_app.py); a queue of its own."""

    def __init__(
        self,
        name: str,
        broker_url: str,
        redis_url: str,
        log_dir: Path,
        quorum: bool = False,
        prefetch: int = 1,
    ) -> None:
        self.name = name
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.env = {
            "BENCH_SIDE": name,
            "BENCH_BROKER_URL": broker_url,
            "BENCH_RECORD_URL": redis_url,
            "BENCH_QUEUE": f"bench-{name}-{uuid.uuid4().hex[:6]}",
            "BENCH_QUORUM": "1" if quorum else "0",
            "BENCH_PREFETCH": str(prefetch),
        }
        self.app: Celery = make_app(self.env)
        self.client = redis.Redis.from_url(redis_url)

    @property
    def queue(self) -> str:
        return self.env["BENCH_QUEUE"]

    def declare(self) -> None:
        """Declare the queue as a worker would (so a publish before it starts lands)."""
        with self.app.connection_for_write() as connection:
            for queue in self.app.amqp.queues.values():
                queue(connection.default_channel).declare()

    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(RUNS_KEY, 0, -1)]

    def lateness(self) -> list[float]:
        """Seconds from each ETA to the start of its execution."""
        return [
            run["at"] - datetime.fromisoformat(run["eta"]).timestamp()
            for run in self.runs()
            if run["eta"] not in (None, "None")
        ]

    @contextmanager
    def worker(self, name: str = "w1") -> Iterator[subprocess.Popen[bytes]]:
        """A solo-pool worker (all in one process, whose RSS is read) until the block ends."""
        self.client.delete(READY_KEY)
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "benchmarks.rabbitmq.worker_app",
            "worker",
            "--pool=solo",
            "-Q",
            self.queue,
            "-n",
            f"{name}-{self.queue}@bench",
            "--without-mingle",
            "--without-gossip",
            "--loglevel=INFO",
        ]
        log_path = self.log_dir / f"{self.queue}-{name}.log"
        process = spawn(command, {**os.environ, **self.env}, log_path, root=REPO_ROOT)
        try:
            wait_until(
                lambda: self.client.sismember(READY_KEY, str(process.pid)),
                timeout=60,
                what=f"{self.name} worker is ready",
                abort=lambda: None if process.poll() is None else log_path.read_text()[-2000:],
            )
            yield process
        finally:
            stop_group(process, timeout=20)

    def log_of(self, name: str = "w1") -> str:
        return (self.log_dir / f"{self.queue}-{name}.log").read_text(errors="replace")


def rss_mib(process: subprocess.Popen[bytes]) -> float:
    return psutil.Process(process.pid).memory_info().rss / (1024 * 1024)


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]
