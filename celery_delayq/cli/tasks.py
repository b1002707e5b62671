"""Commands on pending tasks: ``list``, ``show``, ``cancel``, ``reschedule``, ``promote``
and ``purge``."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import click

from ..brokers.common.message import describe
from ..brokers.connect import open_store
from ..core.results import PendingMessage
from ..ops import api
from ..ops.when import iso
from .dead import dead_json, dead_table
from .render import current_app, emit, json_option, moment, report_per_task, table

#: What ``show`` prints of a message, in this order.
SHOW_FIELDS = [
    "task",
    "id",
    "queue",
    "priority",
    "eta",
    "due",
    "retries",
    "key",
    "args",
    "kwargs",
    "message_id",
]


def message_json(message: PendingMessage) -> dict[str, Any]:
    delay_key = message.record.delay_key
    return {
        "queue": message.queue,
        "due": iso(message.due),
        "key": delay_key.decode("utf-8", "surrogatepass") if delay_key is not None else None,
        **describe(message.record.payload),
    }


@click.command(name="list")
@json_option
@click.option("--queue", "-Q", help="Only this queue.")
@click.option("--task", "task_name", help="Only tasks of this name.")
@click.option("--due-after", help="ISO 8601 time or a duration from now (15m, 2h, 1d).")
@click.option("--due-before", help="ISO 8601 time or a duration from now (15m, 2h, 1d).")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--newest-first", is_flag=True, help="Latest due first (default: soonest).")
@click.option("--dead", is_flag=True, help="Dead letters instead (with the reason).")
def list_(
    as_json: bool,
    queue: str | None,
    task_name: str | None,
    due_after: str | None,
    due_before: str | None,
    limit: int,
    newest_first: bool,
    dead: bool,
) -> None:
    """Pending delayed tasks in due order (or, with --dead, the dead letters)."""
    if dead:
        letters = [dead_json(d) for d in api.dead_letters(current_app(), queue)][:limit]
        emit(as_json, letters, dead_table(letters))
        return
    # A name filter needs each message's headers, so read a wider window and filter here.
    window = limit if task_name is None else max(limit * 20, 1000)
    with open_store(current_app()) as store:
        found = store.pending(
            queue=queue,
            due_after=moment(due_after),
            due_before=moment(due_before),
            limit=window,
            newest_first=newest_first,
        )
    described = [message_json(m) for m in found]
    if task_name:
        described = [m for m in described if m["task"] == task_name]
    described = described[:limit]
    headers = ["task id", "task", "queue", "due (UTC)", "retries"]
    rows = [
        [m["id"], m["task"] or m.get("error"), m["queue"], m["due"], m.get("retries")]
        for m in described
    ]
    if any(m["key"] is not None for m in described):  # keyed messages: show their keys
        headers.append("key")
        rows = [[*row, m["key"] or ""] for row, m in zip(rows, described)]
    emit(as_json, described, table(headers, rows))


@click.command()
@json_option
@click.argument("task_id")
def show(as_json: bool, task_id: str) -> None:
    """Everything about one pending task (every pending message of its id)."""
    with open_store(current_app()) as store:
        found = [message_json(m) for m in store.find(task_id)]
    if not found:
        raise click.ClickException(f"{task_id} has nothing pending (delivered, or never delayed)")
    human = "\n\n".join("\n".join(f"{f:>10}: {m.get(f)}" for f in SHOW_FIELDS) for m in found)
    emit(as_json, found, human)


@click.command()
@json_option
@click.argument("task_ids", nargs=-1, required=True)
def cancel(as_json: bool, task_ids: tuple[str, ...]) -> None:
    """Remove pending tasks for good. Exits 1 if any id had nothing pending."""
    app = current_app()
    report_per_task(as_json, "cancelled", {t: api.cancel(app, t) for t in task_ids})


@click.command()
@json_option
@click.argument("task_id")
@click.option("--eta", help="New ETA, ISO 8601 (naive means UTC).")
@click.option("--countdown", type=float, help="New ETA as seconds from now.")
def reschedule(as_json: bool, task_id: str, eta: str | None, countdown: float | None) -> None:
    """Give a pending task a new ETA. Exits 1 if it had nothing pending."""
    if (eta is None) == (countdown is None):
        raise click.UsageError("give exactly one of --eta or --countdown")
    seconds = moment(eta)
    when = datetime.fromtimestamp(seconds, timezone.utc) if seconds is not None else None
    changed = api.reschedule(current_app(), task_id, eta=when, countdown=countdown)
    report_per_task(as_json, "rescheduled", {task_id: changed})


@click.command()
@json_option
@click.argument("task_ids", nargs=-1)
@click.option("--all-due", is_flag=True, help="Deliver every overdue message now.")
def promote(as_json: bool, task_ids: tuple[str, ...], all_due: bool) -> None:
    """Deliver pending tasks now (their ETA becomes now)."""
    if bool(task_ids) == all_due:
        raise click.UsageError("give task ids or --all-due")
    if all_due:
        moved = api.deliver_all_due(current_app())
        emit(as_json, {"moved": moved}, f"delivered {moved} overdue message(s)")
        return
    report_per_task(as_json, "delivered", api.promote(current_app(), task_ids))


@click.command()
@json_option
@click.option("--queue", "-Q", "queues", multiple=True, help="Only these queues (default: all).")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge(as_json: bool, queues: tuple[str, ...], yes: bool) -> None:
    """Delete pending delayed tasks (they will never run). Periodic entries' occurrences
    written ahead are kept, so the entries go on running: pause or remove an entry to
    stop it."""
    app = current_app()
    targets = [q for q in api.backlog(app) if not queues or q.queue in queues]
    if not yes:
        total = sum(q.pending for q in targets)
        names = ", ".join(q.queue for q in targets) or "no queue"
        click.confirm(f"Delete {total} pending delayed task(s) in {names}?", abort=True)
    removed = api.purge(app, [q.queue for q in targets])
    emit(as_json, removed, f"purged {sum(removed.values())} delayed message(s)")
