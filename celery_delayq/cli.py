"""``celery -A proj delayq ...``: see, act on and run the delayed store from a shell.

Registered through the ``celery.commands`` entry point; the Celery app comes from
Celery's own CLI context (``-A``), so every command reads the app's settings. Each
command prints a table by default and JSON with ``--json``.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

import click
from celery import Celery

from . import api
from .checks import (
    FAIL,
    OK,
    Finding,
    clock_finding,
    consistency_findings,
    mover_finding,
    redis_location,
    server_findings,
)
from .config import DelayqConfig
from .connect import log_startup, mover_thread, open_store
from .message import describe
from .store import DelayedStore, PendingMessage, QueueBacklog

#: Time buckets of ``status --timeline``, in seconds from now.
TIMELINE_EDGES = (0, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
TIMELINE_LABELS = (
    "< 1 min",
    "1-5 min",
    "5-15 min",
    "15-60 min",
    "1-6 h",
    "6-24 h",
    "1-7 d",
    "> 7 d",
)
BAR_WIDTH = 40
DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def _app() -> Celery:
    return click.get_current_context().find_root().obj.app


@contextmanager
def _store() -> Iterator[DelayedStore]:
    with open_store(_app()) as store:
        yield store


def _emit(as_json: bool, data: Any, human: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else human)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[("" if c is None else str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def _iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _due_in(due: float | None, now: float) -> str:
    if due is None:
        return "-"
    return f"in {_ago(due - now)}" if due > now else "overdue"


def _moment(value: str | None) -> float | None:
    """An ISO 8601 time, or a duration from now such as ``90s``, ``15m``, ``2h``, ``1d``."""
    if value is None:
        return None
    match = DURATION.match(value.strip())
    if match:
        number, unit = float(match.group(1)), match.group(2) or "s"
        return time.time() + number * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither ISO 8601 nor a duration like 15m") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


@click.group(name="delayq")
def delayq() -> None:
    """Inspect and operate celery-delayq's delayed tasks in Redis."""


@delayq.command()
@json_option
@click.option("--timeline", is_flag=True, help="Also show how many fall due in coming windows.")
def status(as_json: bool, timeline: bool) -> None:
    """Pending, overdue and lag per queue, and the movers alive.

    Exits 1 with a warning when messages are overdue and no mover is alive.
    """
    app = _app()
    with _store() as store:
        backlog = store.backlog()
        now = store.server_time_ms() / 1000
        alive_within = DelayqConfig.from_app(app).mover_alive_within
        movers = [
            dict(m, alive=now - m.get("last_seen", 0) <= alive_within) for m in store.movers()
        ]
        counts = _timeline_counts(store, now) if timeline else None
        location = redis_location(store.client)
    alive = [m for m in movers if m["alive"]]
    overdue = sum(q.overdue for q in backlog)
    stranded = bool(overdue and not alive)
    data = {
        "redis": location,
        "queues": [_queue_json(q) for q in backlog],
        "movers": movers,
        "movers_alive": len(alive),
        "overdue": overdue,
        "ok": not stranded,
    }
    if counts is not None:
        data["timeline"] = counts
    human = [
        f"store: {location}",
        _table(
            ["queue", "pending", "overdue", "lag", "next due"],
            [
                [
                    q.queue,
                    q.pending,
                    q.overdue,
                    _ago(q.lag) if q.overdue else "-",
                    _due_in(q.next_due, now),
                ]
                for q in backlog
            ],
        )
        if backlog
        else "no delayed messages",
        "",
        _table(
            ["mover", "host", "pid", "last seen", "last move", "moved"],
            [
                [
                    m["name"],
                    m["host"],
                    m["pid"],
                    f"{_ago(now - m['last_seen'])} ago",
                    f"{_ago(now - m['last_move'])} ago" if m.get("last_move") else "-",
                    m["moved"],
                ]
                for m in alive
            ],
        )
        if alive
        else "no mover alive",
    ]
    if counts is not None:
        human += ["", _timeline_chart(counts)]
    if stranded:
        human += [
            "",
            f"WARNING: {overdue} messages are overdue and no mover is alive: start a worker, "
            "beat with celery_delayq.beat:Scheduler, or `celery delayq mover`",
        ]
    _emit(as_json, data, "\n".join(human))
    if stranded:
        raise SystemExit(1)


def _queue_json(q: QueueBacklog) -> dict[str, Any]:
    return {
        "queue": q.queue,
        "pending": q.pending,
        "overdue": q.overdue,
        "lag_seconds": round(q.lag, 3),
        "next_due": _iso(q.next_due),
    }


def _timeline_counts(store: DelayedStore, now: float) -> list[dict[str, Any]]:
    edges = [now + edge for edge in TIMELINE_EDGES] + [float("inf")]
    edges[0] = float("-inf")  # overdue messages count in the first window
    per_queue = store.timeline(edges)
    totals = [sum(counts[i] for counts in per_queue.values()) for i in range(len(edges) - 1)]
    return [{"window": label, "due": total} for label, total in zip(TIMELINE_LABELS, totals)]


def _timeline_chart(counts: list[dict[str, Any]]) -> str:
    peak = max((c["due"] for c in counts), default=0) or 1
    lines = ["falling due"]
    for c in counts:
        bar = "#" * (round(BAR_WIDTH * c["due"] / peak) if c["due"] else 0)
        lines.append(f"  {c['window']:>9}  {bar:<{BAR_WIDTH}}  {c['due']}")
    return "\n".join(lines)


def _message_json(message: PendingMessage) -> dict[str, Any]:
    return {
        "queue": message.queue,
        "due": _iso(message.due),
        **describe(message.record.payload),
    }


@delayq.command(name="list")
@json_option
@click.option("--queue", "-Q", help="Only this queue.")
@click.option("--task", "task_name", help="Only tasks of this name.")
@click.option("--due-after", help="ISO 8601 time or a duration from now (15m, 2h, 1d).")
@click.option("--due-before", help="ISO 8601 time or a duration from now (15m, 2h, 1d).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--newest-first", is_flag=True, help="Latest due first (default: soonest).")
def list_(
    as_json: bool,
    queue: str | None,
    task_name: str | None,
    due_after: str | None,
    due_before: str | None,
    limit: int,
    newest_first: bool,
) -> None:
    """Pending delayed tasks in due order."""
    # A name filter needs each message's headers, so read a wider window and filter here.
    window = limit if task_name is None else max(limit * 20, 1000)
    with _store() as store:
        found = store.pending(
            queue=queue,
            due_after=_moment(due_after),
            due_before=_moment(due_before),
            limit=window,
            newest_first=newest_first,
        )
    described = [_message_json(m) for m in found]
    if task_name:
        described = [m for m in described if m["task"] == task_name]
    described = described[:limit]
    _emit(
        as_json,
        described,
        _table(
            ["task id", "task", "queue", "due (UTC)", "retries"],
            [
                [m["id"], m["task"] or m.get("error"), m["queue"], m["due"], m.get("retries")]
                for m in described
            ],
        ),
    )


@delayq.command()
@json_option
@click.argument("task_id")
def show(as_json: bool, task_id: str) -> None:
    """Everything about one pending task (every pending message of its id)."""
    with _store() as store:
        found = [_message_json(m) for m in store.find(task_id)]
    if not found:
        raise click.ClickException(f"{task_id} has nothing pending (delivered, or never delayed)")
    fields = (
        "task",
        "id",
        "queue",
        "priority",
        "eta",
        "due",
        "retries",
        "args",
        "kwargs",
        "message_id",
    )
    human = "\n\n".join("\n".join(f"{f:>10}: {m.get(f)}" for f in fields) for m in found)
    _emit(as_json, found, human)


@delayq.command()
@json_option
@click.argument("task_ids", nargs=-1, required=True)
def cancel(as_json: bool, task_ids: tuple[str, ...]) -> None:
    """Remove pending tasks for good. Exits 1 if any id had nothing pending."""
    app = _app()
    _report_per_task(as_json, "cancelled", {t: api.cancel(app, t) for t in task_ids})


def _report_per_task(as_json: bool, verb: str, counts: dict[str, int]) -> None:
    """Print how many messages each task id had acted on; exit 1 if any had none."""
    lines = [f"{task_id}: {verb} {n} message(s)" if n else f"{task_id}: nothing pending"
             for task_id, n in counts.items()]  # fmt: skip
    _emit(as_json, counts, "\n".join(lines))
    if not all(counts.values()):
        raise SystemExit(1)


@delayq.command()
@json_option
@click.argument("task_id")
@click.option("--eta", help="New ETA, ISO 8601 (naive means UTC).")
@click.option("--countdown", type=float, help="New ETA as seconds from now.")
def reschedule(as_json: bool, task_id: str, eta: str | None, countdown: float | None) -> None:
    """Give a pending task a new ETA. Exits 1 if it had nothing pending."""
    if (eta is None) == (countdown is None):
        raise click.UsageError("give exactly one of --eta or --countdown")
    moment = _moment(eta) if eta else None
    when = datetime.fromtimestamp(moment, timezone.utc) if moment is not None else None
    changed = api.reschedule(_app(), task_id, eta=when, countdown=countdown)
    _report_per_task(as_json, "rescheduled", {task_id: changed})


@delayq.command()
@json_option
@click.argument("task_ids", nargs=-1)
@click.option("--all-due", is_flag=True, help="Deliver every overdue message now.")
def promote(as_json: bool, task_ids: tuple[str, ...], all_due: bool) -> None:
    """Deliver pending tasks now (their ETA becomes now)."""
    if bool(task_ids) == all_due:
        raise click.UsageError("give task ids or --all-due")
    app = _app()
    if all_due:
        with _store() as store:
            moved = store.move_all_due().moved
        _emit(as_json, {"moved": moved}, f"delivered {moved} overdue message(s)")
        return
    with _store() as store:  # "now" by the Redis clock, which the movers go by
        now = datetime.fromtimestamp(store.server_time_ms() / 1000, timezone.utc)
    promoted = {task_id: api.reschedule(app, task_id, eta=now) for task_id in task_ids}
    with _store() as store:
        store.move_all_due()
    _report_per_task(as_json, "delivered", promoted)


@delayq.command()
@json_option
@click.option("--queue", "-Q", "queues", multiple=True, help="Only these queues (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(as_json: bool, queues: tuple[str, ...], yes: bool) -> None:
    """Delete pending delayed tasks (they will never run)."""
    with _store() as store:
        targets = [q for q in store.backlog() if not queues or q.queue in queues]
        total = sum(q.pending for q in targets)
        if not yes:
            names = ", ".join(q.queue for q in targets) or "no queue"
            click.confirm(f"Delete {total} pending delayed task(s) in {names}?", abort=True)
        removed = {q.queue: store.purge(q.queue) for q in targets}
    _emit(as_json, removed, f"purged {sum(removed.values())} delayed message(s)")


@delayq.command()
@click.option(
    "--loglevel",
    "-l",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def mover(loglevel: str) -> None:
    """Run a standalone mover until SIGTERM or SIGINT."""
    logging.basicConfig(level=loglevel.upper(), format="[%(asctime)s: %(levelname)s] %(message)s")
    app = _app()
    log_startup(app, "this standalone mover moves due messages")
    thread = mover_thread(app, "standalone mover")
    done = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: done.set())
    thread.start()
    click.echo("celery-delayq: standalone mover running; stop with SIGTERM or Ctrl-C", err=True)
    while not done.wait(1.0):
        pass
    thread.stop()
    click.echo("celery-delayq: standalone mover stopped", err=True)


@delayq.command()
@json_option
@click.option("--repair", is_flag=True, help="Fix store inconsistencies that are safe to fix.")
def doctor(as_json: bool, repair: bool) -> None:
    """Check the store's Redis and the store itself, and say what to fix. Exits 1 on a
    failed check."""
    app = _app()
    with _store() as store:
        findings: list[Finding] = [
            *server_findings(store.client),
            clock_finding(store.client),
            mover_finding(store, DelayqConfig.from_app(app).mover_alive_within),
            *consistency_findings(store, repair=repair),
        ]
        location = redis_location(store.client)
    data = {
        "redis": location,
        "findings": [f.__dict__ for f in findings],
        "ok": all(f.level != FAIL for f in findings),
    }
    marks = {OK: "ok  ", "warn": "WARN", FAIL: "FAIL"}
    human = [f"store: {location}"] + [
        f"[{marks[f.level]}] {f.check}: {f.message}" + (f"\n       fix: {f.fix}" if f.fix else "")
        for f in findings
    ]
    _emit(as_json, data, "\n".join(human))
    if not data["ok"]:
        raise SystemExit(1)


def _register_optional_commands() -> None:
    """Commands that live in the modules they belong to."""
    from .metrics import exporter_command
    from .rescue import rescue_command

    delayq.add_command(exporter_command)
    delayq.add_command(rescue_command)


_register_optional_commands()
