"""``celery delayq limits``: flow control's buckets (a rate- or concurrency-limited task,
or one limit key of it), those with the most messages waiting first, with totals."""

from __future__ import annotations

import click

from ..brokers.connect import open_store
from ..config.settings import config_of
from ..ops.buckets import (
    DEFAULT_TOP,
    LimitsListing,
    bucket_json,
    limits_text,
    read_limits,
    released_text,
    running_text,
    state_text,
)
from .render import current_app, emit, json_option, printable, table


@click.command()
@json_option
@click.option("--queue", help="Only this queue's buckets.")
@click.option("--task", help="Only this task's buckets (its own and its limit keys').")
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=DEFAULT_TOP,
    show_default=True,
    help="List this many buckets, those with the most waiting (the totals count all).",
)
def limits(as_json: bool, queue: str | None, task: str | None, top: int) -> None:
    """Flow-controlled tasks: per bucket its limits, messages waiting, released in each
    limit's current window, running, and whether it is paused or throttled until when."""
    app = current_app()
    with open_store(app) as store:
        found = read_limits(store, config_of(app).release_log, queue=queue, task=task, top=top)
    data = {
        "buckets": found.buckets,
        "waiting": found.waiting,
        "running": found.running,
        "held": found.held,
        "throttled": found.throttled,
        "shown": [bucket_json(b) for b in found.shown],
    }
    emit(as_json, data, limits_human(found))


def limits_human(found: LimitsListing) -> str:
    if not found.buckets:
        return "no flow-controlled messages"
    rows = [
        [
            printable(b.queue),
            printable(b.task),
            "-" if b.key is None else printable(b.key),
            limits_text(b),
            b.waiting,
            released_text(b),
            running_text(b),
            state_text(b),
        ]
        for b in found.shown
    ]
    headers = ["queue", "task", "limit key", "limits", "waiting", "released", "running", "state"]
    total = (
        f"{found.buckets} bucket(s): {found.waiting} waiting, {found.running} running, "
        f"{found.throttled} throttled, {found.held} paused or held"
    )
    if len(found.shown) < found.buckets:
        total += f" (the {len(found.shown)} with the most waiting shown)"
    return "\n".join([table(headers, rows), total])
