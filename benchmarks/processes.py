"""Worker subprocesses: start, wait until ready, read memory, and always stop them.

Workers are started by ``celery_delayq.testing.spawn``: in their own session, so a
Ctrl-C in the terminal reaches only the orchestrator, which then stops them
deliberately (SIGTERM, then SIGKILL) from its ``finally`` blocks; on Linux each worker
also gets SIGKILL if the orchestrator itself dies abruptly, so no worker outlives a
crashed or killed benchmark.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from pathlib import Path

import psutil
import redis

from celery_delayq.testing import celery_command, spawn, stop_group, wait_until

from .runconfig import RunConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB = 1024 * 1024


def cpu_seconds(process: psutil.Process) -> float:
    """CPU time (user and system) a process has used so far."""
    times = process.cpu_times()
    return float(times.user + times.system)


def redis_cpu_seconds(client: redis.Redis) -> float:
    """CPU time (user and system, all its threads) a Redis server has used so far."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class WorkerProcess:
    """One ``celery worker --pool=solo`` subprocess consuming the run's queue.

    The solo pool keeps everything (held ETA messages, task execution, the delayq
    mover thread) in the one process whose RSS is measured. ``pool="prefork"`` runs
    tasks in one child process instead, while the worker's own loop goes on.
    """

    def __init__(self, config: RunConfig, name: str, log_dir: Path, pool: str = "solo") -> None:
        self.config = config
        self.name = name
        self.pool = pool
        self.log_path = log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"worker {self.name} is not running")
        return self.process.pid

    def command(self) -> list[str]:
        return celery_command(
            "benchmarks.worker_app",
            "worker",
            f"--pool={self.pool}",
            *(["--concurrency=1"] if self.pool != "solo" else []),
            "-Q",
            self.config.queue,
            "-n",
            f"{self.name}@bench",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
            "--loglevel=WARNING",
        )

    def start(self) -> None:
        env = {**os.environ, **self.config.to_env()}
        self.process = spawn(self.command(), env, self.log_path, root=REPO_ROOT)

    def wait_ready(self, client: redis.Redis, timeout: float = 60.0) -> None:
        """Block until the worker announced itself ready; fail fast if it exited."""
        try:
            wait_until(
                lambda: client.sismember(self.config.ready_key, str(self.pid)),
                timeout=timeout,
                interval=0.05,
                what=f"worker {self.name} is ready",
                abort=self._exited,
            )
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}:\n{self.log_tail()}") from None

    def _exited(self) -> str | None:
        if self.process is None or self.process.poll() is None:
            return None
        return f"worker {self.name} exited with {self.process.returncode}:\n{self.log_tail()}"

    def rss(self) -> int:
        """Resident memory of the worker's main process, in bytes."""
        return int(psutil.Process(self.pid).memory_info().rss)

    def cpu_seconds(self) -> float:
        """CPU time the worker's main process (its tasks and its mover thread, with
        the solo pool) has used since it started."""
        return cpu_seconds(psutil.Process(self.pid))

    def settled_rss(
        self,
        *,
        interval: float = 0.5,
        samples: int = 4,
        tolerance: int = MIB // 4,
        timeout: float = 60.0,
    ) -> int:
        """RSS once it stops changing: ``samples`` readings within ``tolerance`` bytes.

        A single reading right after a burst of work can catch the worker mid-way;
        waiting for a plateau makes the idle and loaded readings comparable.
        """
        readings: deque[int] = deque(maxlen=samples)
        deadline = time.monotonic() + timeout
        while True:
            readings.append(self.rss())
            stable = len(readings) == samples and max(readings) - min(readings) <= tolerance
            if stable or time.monotonic() > deadline:
                return readings[-1]
            time.sleep(interval)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM the worker's process group, then SIGKILL it if still alive after ``timeout``."""
        process, self.process = self.process, None
        if process is not None:
            stop_group(process, timeout)

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once (a machine or OOM kill)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])
