"""``celery delayq pause``, ``resume`` and ``throttle``: hold a flow-controlled task's
releases (or one limit key's, or a whole queue's) across every worker (ops/pause.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from celery import Celery

from ..config.limits import limits_of
from ..config.settings import config_of
from ..core.store.holds import BucketHold
from ..ops import pause as ops_pause
from ..ops.when import iso
from .render import current_app, emit, json_option

key_option = click.option("--key", default=None, help="Only this limit key's messages.")
queue_option = click.option(
    "--queue", "-Q", default=None, help="The whole queue, every task's messages in it."
)


def _target(task: str | None, queue: str | None) -> None:
    if (task is None) == (queue is None):
        raise click.UsageError("give a task name or --queue (not both)")


def _warn_unlimited(app: Celery, task: str) -> None:
    """A task this app knows no limit of: its messages may not wait in the store."""
    if not limits_of(app, config_of(app)).spec_of(task):
        click.echo(
            f"warning: {task} has no rate or concurrency limit in this app: only its "
            "messages that wait in the store (a limited task's) are held",
            err=True,
        )


def _held(change: Callable[[], BucketHold]) -> BucketHold:
    """The hold ``change`` leaves; what it refuses (a task name, key or length) as a
    usage error."""
    try:
        return change()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None


def _report(as_json: bool, task: str, key: str | None, hold: BucketHold) -> None:
    until = None if hold.until_us is None else iso(hold.until_us / 1_000_000)
    state = "paused" if hold.paused else f"held until {until}" if until else "releasing"
    label = task if key is None else f"{task} (key {key})"
    data: dict[str, Any] = {
        "task": task,
        "key": key,
        "paused": hold.paused,
        "until": until,
        "waiting": hold.waiting,
    }
    emit(as_json, data, f"{label}: {state}, {hold.waiting} message(s) waiting")


@click.command()
@json_option
@click.argument("task", required=False)
@key_option
@queue_option
def pause(as_json: bool, task: str | None, key: str | None, queue: str | None) -> None:
    """Release none of TASK's messages (or --key's, or --queue's) until `resume`; they
    wait in Redis, on every worker. A queue's messages sent without a countdown to tasks
    without limits still go straight to the broker."""
    _target(task, queue)
    app = current_app()
    if queue is not None:
        ops_pause.pause_queue(app, queue)
        emit(as_json, {"queue": queue, "paused": True}, f"queue {queue}: paused")
        return
    assert task is not None
    _warn_unlimited(app, task)
    _report(as_json, task, key, _held(lambda: ops_pause.pause(app, task, key)))


@click.command()
@json_option
@click.argument("task", required=False)
@key_option
@queue_option
def resume(as_json: bool, task: str | None, key: str | None, queue: str | None) -> None:
    """End a pause or a throttle of TASK (or --key's, or --queue's): its messages are
    released again, within its limits."""
    _target(task, queue)
    app = current_app()
    if queue is not None:
        was = ops_pause.resume_queue(app, queue)
        human = f"queue {queue}: resumed" if was else f"queue {queue}: was not paused"
        emit(as_json, {"queue": queue, "paused": False, "was_paused": was}, human)
        return
    assert task is not None
    _report(as_json, task, key, _held(lambda: ops_pause.resume(app, task, key)))


@click.command()
@json_option
@click.argument("task")
@click.argument("seconds", type=click.FloatRange(0, ops_pause.MOST_THROTTLE_SECONDS))
@key_option
def throttle(as_json: bool, task: str, seconds: float, key: str | None) -> None:
    """Release none of TASK's messages (or --key's) for SECONDS, on every worker. It
    never shortens a longer throttle or a pause."""
    app = current_app()
    _warn_unlimited(app, task)
    _report(as_json, task, key, _held(lambda: ops_pause.throttle(app, task, seconds, key)))
