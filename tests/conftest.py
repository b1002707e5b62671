"""Fixtures: a real redis-server per test session, flushed between tests; Celery apps on it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import kombu.pools
import pytest
import redis
from celery import Celery

from celery_delayq.testing import RedisServer

TRANSPORT = "celery_delayq.transport:Transport"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on a freshly flushed server (data and scripts)."""
    client = redis_server.client()
    client.flushall()
    client.script_flush()
    yield client
    client.close()


@pytest.fixture
def make_app(
    redis_server: RedisServer, redis_client: redis.Redis
) -> Iterator[Callable[..., Celery]]:
    """Build a Celery app using the celery-delayq transport; settings as keyword args.

    kombu keeps producer pools process-wide, keyed by broker URL: they are reset so
    each test's channels are built with that test's settings.
    """
    apps: list[Celery] = []
    kombu.pools.reset()

    def make(url: str | None = None, **settings: Any) -> Celery:
        app = Celery("tests", set_as_current=True)
        app.conf.update(
            {
                "broker_url": url or redis_server.url,
                "broker_transport": TRANSPORT,
                "broker_connection_retry_on_startup": False,
                "task_default_queue": "default",
                **settings,
            }
        )
        app.set_current()
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()  # also forgets the app, so later tests see only their own apps
    kombu.pools.reset()


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app()


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> Any:
    """Poll until ``predicate()`` is truthy; return its value or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


REPO_ROOT = Path(__file__).resolve().parent.parent


@contextmanager
def celery_process(
    command: str,
    broker_url: str,
    settings: dict[str, Any] | None = None,
    *args: str,
    ready: str = "ready.",
    timeout: float = 30.0,
    record_url: str | None = None,
    log_level: str | None = "info",
) -> Iterator[subprocess.Popen[str]]:
    """Run ``celery -A tests.worker_app <command>`` until the block ends.

    Waits for the ``ready`` line in its log; the process is killed at the end whatever
    happens, so a failing test leaves nothing running.
    """
    env = dict(os.environ, BROKER_URL=broker_url, DELAYQ_SETTINGS=json.dumps(settings or {}))
    env["BEAT_SCHEDULE_FILE"] = tempfile.mktemp(prefix="delayq-beat-")
    env["RECORD_URL"] = record_url or broker_url
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.worker_app",
            command,
            *(["-l", log_level] if log_level else []),
            *args,
        ],  # fmt: skip
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if ready in line:
                break
            if time.monotonic() > deadline:
                break
        else:
            raise AssertionError("celery {} exited:\n{}".format(command, "".join(lines)))
        if ready not in "".join(lines):
            raise AssertionError("celery {} not ready:\n{}".format(command, "".join(lines)))
        threading.Thread(target=_drain, args=(proc, lines), daemon=True).start()
        proc.output = lines  # type: ignore[attr-defined]
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def standalone_mover(
    broker_url: str, settings: dict[str, Any] | None = None
) -> AbstractContextManager[subprocess.Popen[str]]:
    """``celery -A tests.worker_app delayq mover`` until the block ends, once running."""
    return celery_process("delayq", broker_url, settings, "mover",
                          ready="standalone mover running", log_level=None)  # fmt: skip


def _drain(proc: subprocess.Popen[str], lines: list[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)


def runs(client: redis.Redis) -> list[dict[str, Any]]:
    """Executions recorded by tests.worker_app tasks, oldest first."""
    return [json.loads(raw) for raw in client.lrange("test:runs", 0, -1)]
