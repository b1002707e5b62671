"""The pages: overview, scheduled tasks, one task, dead letters, flow control's limits,
periodic entries (and one entry's change log), doctor,
and the token login and logout. Every page reads the store afresh, a bounded amount per
request; nothing but the moves chart and the last full doctor check is kept between
requests.

Every query parameter is checked (a 400 that says which one and why): a filter of at
most FIELD_MAX characters, moments a date can hold, a cursor a page wrote."""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from flask import (
    Blueprint,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)

from ..brokers.common.message import message_headers
from ..brokers.connect import open_store
from ..config.settings import config_of
from ..core.health.store_status import read_status
from ..ops import api
from ..ops.browse import Cursor, Task, TaskFilter, browse
from ..ops.buckets import (
    limits_text,
    read_limits,
    released_text,
    running_text,
    state_text,
)
from ..ops.health import doctor as run_doctor
from ..ops.when import parse_moment
from ..periodic import manage
from ..periodic.audit import changes
from ..periodic.describe import entry_text
from ..periodic.entry import MAX_NAME_LENGTH
from .charts import bar_chart, line_chart
from .context import context, problem
from .links import back_to
from .links import safe_next as safe_next  # its home before links.py
from .present import folded_value, pretty_repr

pages = Blueprint("pages", __name__)

#: Timeline ranges: how many bars, seconds per bar, and the label format (UTC).
RANGES = {
    "minute": (60, 1, "%H:%M:%S"),
    "hour": (60, 60, "%H:%M"),
    "day": (48, 1800, "%H:%M"),
    "week": (28, 6 * 3600, "%a %H:%M"),
}
PAGE_SIZE = 50
#: Charts shown side by side are drawn narrower, so their text keeps its size.
HALF_WIDTH = 440
#: How long, and through how many messages, a page may look for matches of a name, key
#: or search filter before it shows what it found and offers to search further (ops/browse.py).
SCAN_SECONDS = 0.1
SCAN_BUDGET = 100_000
#: The longest filter field (a queue, task name, search text, delay key, moment) read.
FIELD_MAX = 500
#: The longest task id looked up.
TASK_ID_MAX = 255
#: Flow-control buckets the Limits page lists (those with the most waiting).
LIMITS_SHOWN = 100
#: The longest overview refresh period (seconds).
REFRESH_MAX = 3600


class BadFilter(ValueError):
    """A filter field that cannot be read; the page says which and why."""


def filter_from(fields: Mapping[str, str]) -> TaskFilter:
    """The filter a scheduled-tasks form (or a bulk action repeating it) describes."""
    text = {name: _field(fields, name) for name in ("queue", "task", "q", "key", "after", "before")}
    moments = {}
    for name, label in (("after", "due after"), ("before", "due before")):
        value = text[name]
        try:
            moments[name] = parse_moment(value) if value else None
        except ValueError as exc:
            raise BadFilter(f"{label}: {exc}") from None
    return TaskFilter(
        queue=text["queue"],
        task=text["task"],
        due_after=moments["after"],
        due_before=moments["before"],
        search=text["q"],
        key=text["key"],
    )


def _field(fields: Mapping[str, str], name: str) -> str | None:
    value = (fields.get(name) or "").strip()
    if len(value) > FIELD_MAX:
        raise BadFilter(f"{name}: longer than {FIELD_MAX} characters")
    return value or None


@pages.get("/")
def overview() -> Any:
    ctx = context()
    ctx.sampler.start()
    span = request.args.get("range", "hour")
    if span not in RANGES:
        return problem(400, "Unknown range", f"range must be one of {', '.join(RANGES)}")
    bars, width, label_format = RANGES[span]
    with open_store(ctx.celery, fail_fast=True) as store:
        snapshot = read_status(store, config_of(ctx.celery).mover_alive_within)
        edges = [snapshot.now + i * width for i in range(bars + 1)]
        per_queue = store.timeline(edges)
    falling_due = [sum(counts[i] for counts in per_queue.values()) for i in range(bars)]
    labels = [_clock(edge, label_format) for edge in edges[:-1]]
    return render_template(
        "overview.html",
        snapshot=snapshot,
        span=span,
        ranges=list(RANGES),
        timeline=bar_chart(
            falling_due, labels, title=f"Falling due in the next {span}", unit="tasks"
        ),
        falling_due=sum(falling_due),
        **_moves_charts(),
        findings=run_doctor(ctx.celery, read_store=False),
        refresh=_refresh_seconds(),
    )


def _moves_charts() -> dict[str, Any]:
    intervals = context().sampler.intervals()
    labels = [_clock(i.end, "%H:%M") for i in intervals]
    moves = bar_chart(
        [i.moved_per_second for i in intervals],
        labels,
        title="Moved per second",
        unit="/s",
        width=HALF_WIDTH,
    )
    lateness = line_chart(
        {
            "mean": [i.mean_lateness_ms for i in intervals],
            "p99 (bucket bound)": [i.p99_lateness_ms for i in intervals],
        },
        labels,
        title="Move lateness",
        unit="ms",
        width=HALF_WIDTH,
    )
    return {"moves": moves, "lateness": lateness, "sampled": len(intervals)}


def _refresh_seconds() -> int:
    try:
        return min(max(0, int(request.args.get("refresh", "10")[:8])), REFRESH_MAX)
    except ValueError:
        return 10


def _clock(seconds: float, label_format: str) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime(label_format)


@pages.get("/scheduled")
def scheduled() -> Any:
    ctx = context()
    try:
        where = filter_from(request.args)
        after = Cursor.decode(request.args["from"]) if request.args.get("from") else None
    except (BadFilter, ValueError) as exc:
        return problem(400, "That filter cannot be read", str(exc))
    with open_store(ctx.celery, fail_fast=True) as store:
        page = browse(
            store, where, after, PAGE_SIZE, scan_budget=SCAN_BUDGET, scan_seconds=SCAN_SECONDS
        )
        queues = store.queues()
        pending = sum(store.pending_counts(queues).values())
    return render_template(
        "scheduled.html",
        page=page,
        where=where,
        fields=request.args,
        queues=queues,
        pending=pending,
        filtered=where != TaskFilter(),
        next_url=_with_args(**{"from": Cursor.encode(page.next)}) if page.next else None,
        first_url=_with_args(**{"from": ""}),
    )


def _with_args(**changes: str) -> str:
    args = {**request.args.to_dict(), **changes}
    query = "&".join(f"{k}={_quote(v)}" for k, v in args.items() if v)
    return url_for(str(request.endpoint), **(request.view_args or {})) + f"?{query}"


def _quote(value: str) -> str:
    return quote(value, safe="")


@pages.get("/task/<path:task_id>")
def task(task_id: str) -> Any:
    if len(task_id) > TASK_ID_MAX:
        return problem(400, "Not a task id", f"A task id is at most {TASK_ID_MAX} characters.")
    with open_store(context().celery, fail_fast=True) as store:
        found = [Task(message) for message in store.find(task_id)]
    if not found:
        return problem(
            404,
            "No pending task with that id",
            f"Nothing is pending under {task_id!r}: it may have run already, been "
            "cancelled, or never been delayed.",
        )
    details = [
        {
            "task": t,
            "headers": message_headers(t.message.record.payload),
            "args": folded_value(pretty_repr(t.info.get("args"))),
            "kwargs": folded_value(pretty_repr(t.info.get("kwargs"))),
        }
        for t in found
    ]
    return render_template("task.html", task_id=task_id, details=details)


@pages.get("/dead")
def dead() -> Any:
    letters = [Task(letter) for letter in api.dead_letters(context().celery)]
    return render_template("dead.html", letters=letters)


@pages.get("/limits")
def limits() -> Any:
    """Flow control's buckets (a limited task, or one limit key of it), those with the
    most waiting first: limits, waiting, released in each limit's current window,
    running, and paused or throttled until when; with totals of all that match."""
    ctx = context()
    try:
        queue, task = _field(request.args, "queue"), _field(request.args, "task")
    except BadFilter as exc:
        return problem(400, "That filter cannot be read", str(exc))
    log_entries = config_of(ctx.celery).release_log
    with open_store(ctx.celery, fail_fast=True) as store:
        found = read_limits(store, log_entries, queue=queue, task=task, top=LIMITS_SHOWN)
        queues = store.queues()
    rows = [
        {
            "bucket": b,
            "limits": limits_text(b),
            "released": released_text(b),
            "running": running_text(b),
            "state": state_text(b),
        }
        for b in found.shown
    ]
    return render_template(
        "limits.html", found=found, rows=rows, queues=queues, queue=queue, task=task
    )


@pages.get("/periodic")
def periodic() -> Any:
    """Every periodic entry: its schedule, next runs, last run, the occurrences missed
    while every beat was down, and (unless read-only) pause, resume and run now; and the
    stored entries that cannot be read, with why."""
    app = context().celery
    with open_store(app, fail_fast=True):  # Redis down: a 503 at once, not kombu's retries
        found = manage.listing(app)
    listed = found.entries
    schedules = {info.entry.name: entry_text(info.entry) for info in listed}
    return render_template(
        "periodic.html", entries=listed, schedules=schedules, unreadable=found.unreadable
    )


@pages.get("/periodic/history")
def periodic_history() -> Any:
    """One periodic entry's change log (also once it is removed), newest first: who
    changed it, when, through what, and each field's old and new value."""
    name = request.args.get("name", "")
    if not name or len(name) > MAX_NAME_LENGTH:
        return problem(
            400, "Bad entry name", f"Name one entry, of at most {MAX_NAME_LENGTH} characters."
        )
    app = context().celery
    with open_store(app, fail_fast=True):  # Redis down: a 503 at once
        found = changes(app, name)
    return render_template("periodic_history.html", name=name, records=found)


@pages.get("/doctor")
def doctor() -> Any:
    """Redis and the movers, checked on each load; the store's consistency, which reads
    every record (seconds with a million pending), only when asked: a POST (below), its
    findings kept and shown with their time, so a reload or a crawler never starts it."""
    ctx = context()
    return render_template(
        "doctor.html",
        report=run_doctor(ctx.celery, read_store=False),
        full=ctx.full_check,
        checking=ctx.checking.locked(),
    )


@pages.post("/doctor")
def doctor_full_check() -> Any:
    """Run the full check (one at a time), keep what it found, and show the page."""
    ctx = context()
    if ctx.checking.acquire(blocking=False):
        try:
            ctx.full_check = (time.time(), run_doctor(ctx.celery))
        finally:
            ctx.checking.release()
    else:
        flash("A full check is running already: its findings show here when it ends.", "warn")
    return redirect(url_for("pages.doctor"))


@pages.route("/login", methods=["GET", "POST"])
def login() -> Any:
    ctx = context()
    target = back_to(request.values.get("next"))
    if request.method == "GET":
        return render_template("login.html", next=target, failed=False)
    address = request.remote_addr or ""
    wait = ctx.failed_logins.retry_after(address)
    if wait:
        body = render_template("login.html", next=target, failed=False, wait=wait)
        return body, 429, {"Retry-After": str(int(wait) + 1)}
    if ctx.access.token_ok(request.form.get("token")):
        ctx.failed_logins.succeeded(address)
        session.clear()  # a fresh session (and CSRF token) for the logged-in user
        session["login"] = ctx.access.login_digest(current_app.secret_key or "")
        return redirect(target)
    ctx.failed_logins.failed(address)
    return render_template("login.html", next=target, failed=True), 401


@pages.post("/logout")
def logout() -> Any:
    """End a token login (a POST with the CSRF token: no other site can log you out)."""
    session.clear()
    return redirect(url_for("pages.login" if context().access.token else "pages.overview"))
