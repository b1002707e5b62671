"""``celery delayq status``: pending, overdue and lag per queue, the movers alive, flow
control per task, and optionally a chart of what falls due when."""

from __future__ import annotations

from typing import Any

import click

from ..brokers.connect import open_store
from ..config.settings import config_of
from ..core.health.store_status import StoreStatus, read_status
from ..core.results import QueueBacklog, TaskFlow
from ..core.store import DelayedStore
from ..core.topology import redis_location
from ..ops.buckets import flow_json
from ..ops.when import ago, due_in, iso
from ..periodic.history import EntryHistory
from ..periodic.registry import EntryRegistry
from .render import current_app, emit, json_option, printable, table

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
STRANDED_WARNING = (
    "WARNING: {overdue} messages are overdue and no mover is alive: start a worker, "
    "beat with celery_delayq.beat:Scheduler, or `celery delayq mover`"
)


DEAD_NOTE = "{dead} dead letter(s) with their reason: `celery delayq list --dead`"


@click.command()
@json_option
@click.option("--timeline", is_flag=True, help="Also show how many fall due in coming windows.")
def status(as_json: bool, timeline: bool) -> None:
    """Pending, overdue and lag per queue, the movers alive, and flow control per task.

    Exits 1 with a warning when messages are overdue and no mover is alive.
    """
    app = current_app()
    with open_store(app) as store:
        snapshot = read_status(store, config_of(app).mover_alive_within)
        counts = timeline_counts(store, snapshot.now) if timeline else None
        location = redis_location(store.client)
        periodic = periodic_json(store)
        flows = store.task_flows()
    data = status_json(location, snapshot)
    data["periodic"] = periodic
    data["flow_control"] = [flow_json(flow) for flow in flows]
    human = [f"store: {location}", queues_table(snapshot), "", movers_table(snapshot)]
    if flows:
        human += ["", flow_table(flows)]
    if periodic["entries"] or periodic["unreadable"]:
        human += ["", periodic_summary(periodic)]
    if counts is not None:
        data["timeline"] = counts
        human += ["", timeline_chart(counts)]
    if snapshot.stranded:
        human += ["", STRANDED_WARNING.format(overdue=snapshot.overdue)]
    dead = sum(q.dead for q in snapshot.backlog)
    if dead:
        human += ["", DEAD_NOTE.format(dead=dead)]
    emit(as_json, data, "\n".join(human))
    if snapshot.stranded:
        raise SystemExit(1)


def status_json(location: str, snapshot: StoreStatus) -> dict[str, Any]:
    return {
        "redis": location,
        "queues": [queue_json(q) for q in snapshot.backlog],
        "movers": snapshot.movers,
        "movers_alive": len(snapshot.alive),
        "overdue": snapshot.overdue,
        "ok": not snapshot.stranded,
    }


def queue_json(q: QueueBacklog) -> dict[str, Any]:
    return {
        "queue": q.queue,
        "pending": q.pending,
        "overdue": q.overdue,
        "lag_seconds": round(q.lag, 3),
        "next_due": iso(q.next_due),
        "in_flight": q.in_flight,
        "dead": q.dead,
        "waiting": q.waiting,
    }


def periodic_json(store: DelayedStore) -> dict[str, Any]:
    """How many periodic entries there are, and the occurrences missed while every beat
    was down: run late (their ``catch_up``) or not run, and those skipped while the
    entry's previous run was going (``overlap``), per entry that had any; and the stored
    entries that cannot be read, with why."""
    scan = EntryRegistry(store.client, store.keys).scan()
    entries = scan.entries
    history = EntryHistory(store.client, store.keys).read(e.entry.name for e in entries)
    missing = [
        {"name": name, "late": h.late, "missed": h.missed, "skipped": h.skipped}
        for name, h in history.items()
        if h.late or h.missed or h.skipped
    ]
    return {
        "entries": len(entries),
        "paused": sum(not e.entry.enabled for e in entries),
        "late": sum(h.late for h in history.values()),
        "missed": sum(h.missed for h in history.values()),
        "skipped": sum(h.skipped for h in history.values()),
        "entries_late_or_missed": missing,
        "unreadable": [{"name": each.name, "reason": each.reason} for each in scan.unreadable],
    }


def periodic_summary(periodic: dict[str, Any]) -> str:
    lines = [
        f"periodic entries: {periodic['entries']} ({periodic['paused']} paused); "
        f"occurrences run late: {periodic['late']}, missed: {periodic['missed']} "
        "(while every beat was down; `celery delayq periodic list`); "
        f"skipped, their previous run still going: {periodic['skipped']}"
    ]
    if periodic["entries_late_or_missed"]:
        rows = [
            [e["name"], e["late"], e["missed"], e["skipped"]]
            for e in periodic["entries_late_or_missed"]
        ]
        lines.append(table(["periodic entry", "run late", "missed", "skipped"], rows))
    for each in periodic["unreadable"]:
        lines.append(
            f"WARNING: periodic entry {each['name']!r} cannot be read, and is left out: "
            f"{each['reason']}"
        )
    return "\n".join(lines)


def queues_table(snapshot: StoreStatus) -> str:
    if not snapshot.backlog:
        return "no delayed messages"
    rows = [
        [
            q.queue,
            q.pending,
            q.overdue,
            ago(q.lag) if q.overdue else "-",
            due_in(q.next_due, snapshot.now),
            q.in_flight,
            q.dead,
        ]
        for q in snapshot.backlog
    ]
    return table(["queue", "pending", "overdue", "lag", "next due", "in flight", "dead"], rows)


def flow_table(flows: list[TaskFlow]) -> str:
    """Flow control per task: its buckets (of them, limit keys'), messages waiting,
    released, running, and buckets throttled, paused or held."""
    rows = [
        [
            printable(f.queue),
            printable(f.task),
            f"{f.buckets} ({f.keyed} keyed)" if f.keyed else f.buckets,
            f.waiting,
            f.released,
            f.running,
            f.throttled,
            f.held,
        ]
        for f in flows
    ]
    headers = ["queue", "flow-controlled task", "buckets", "waiting", "released", "running"]
    headers += ["throttled", "paused/held"]
    return table(headers, rows) + "\nper bucket: `celery delayq limits`"


def movers_table(snapshot: StoreStatus) -> str:
    if not snapshot.alive:
        return "no mover alive"
    now = snapshot.now
    rows = [
        [
            m["name"],
            m["host"],
            m["pid"],
            f"{ago(now - m['last_seen'])} ago",
            f"{ago(now - m['last_move'])} ago" if m.get("last_move") else "-",
            m["moved"],
        ]
        for m in snapshot.alive
    ]
    return table(["mover", "host", "pid", "last seen", "last move", "moved"], rows)


def timeline_counts(store: DelayedStore, now: float) -> list[dict[str, Any]]:
    edges = [now + edge for edge in TIMELINE_EDGES] + [float("inf")]
    edges[0] = float("-inf")  # overdue messages count in the first window
    per_queue = store.timeline(edges)
    totals = [sum(counts[i] for counts in per_queue.values()) for i in range(len(edges) - 1)]
    return [{"window": label, "due": total} for label, total in zip(TIMELINE_LABELS, totals)]


def timeline_chart(counts: list[dict[str, Any]]) -> str:
    peak = max((c["due"] for c in counts), default=0) or 1
    lines = ["falling due"]
    for c in counts:
        bar = "#" * (round(BAR_WIDTH * c["due"] / peak) if c["due"] else 0)
        lines.append(f"  {c['window']:>9}  {bar:<{BAR_WIDTH}}  {c['due']}")
    return "\n".join(lines)
