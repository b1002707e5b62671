"""``celery delayq pause``, ``resume`` and ``throttle``: hold a flow-controlled task's
releases (or one limit key's, or a whole queue's) across every worker (ops/pause.py)."""

from __future__ import annotations

import functools
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


def _warn_unlimited(app: Celery, task: str) -> None:
    """A task this app knows no limit of: its messages may not wait in the store."""
    if not limits_of(app, config_of(app)).spec_of(task):
        click.echo(
            f"warning: {task} has no rate or concurrency limit in this app: only its "
            "messages that wait in the store (a limited task's) are held",
            err=True,
        )


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


QueueChange = Callable[[Celery, str, bool], None]  # (app, queue, as_json): it reports
BucketChange = Callable[..., BucketHold]  # (app, task, key, the command's own values)


def hold_command(
    *arguments: Callable[[Any], Any], on_queue: QueueChange | None = None, warn: bool = False
) -> Callable[[BucketChange], click.Command]:
    """A command on the hold of TASK's bucket (or --key's): the decorated function makes
    the change, given the app, TASK, --key and the values of ``arguments`` (click
    arguments after TASK), and the command reports the hold it leaves. With ``on_queue``
    it takes --queue instead of TASK, for which ``on_queue`` acts and reports; with
    ``warn`` it warns of a task without limits first."""

    def decorate(change: BucketChange) -> click.Command:
        @functools.wraps(change)  # its name, and its docstring as the command's help
        def run(as_json: bool, task: str | None, key: str | None, **values: Any) -> None:
            queue = values.pop("queue", None)
            if on_queue is not None and (task is None) == (queue is None):
                raise click.UsageError("give a task name or --queue (not both)")
            app = current_app()
            if on_queue is not None and queue is not None:
                on_queue(app, queue, as_json)
                return
            assert task is not None
            if warn:
                _warn_unlimited(app, task)
            try:  # what the change refuses (a task name, key or length) is a usage error
                hold = change(app, task, key, **values)
            except ValueError as exc:
                raise click.UsageError(str(exc)) from None
            _report(as_json, task, key, hold)

        options = [key_option] if on_queue is None else [key_option, queue_option]
        command: Any = run
        for decorator in reversed(
            [json_option, click.argument("task", required=on_queue is None), *arguments, *options]
        ):
            command = decorator(command)
        return click.command()(command)

    return decorate


def _pause_queue(app: Celery, queue: str, as_json: bool) -> None:
    ops_pause.pause_queue(app, queue)
    emit(as_json, {"queue": queue, "paused": True}, f"queue {queue}: paused")


def _resume_queue(app: Celery, queue: str, as_json: bool) -> None:
    was = ops_pause.resume_queue(app, queue)
    human = f"queue {queue}: resumed" if was else f"queue {queue}: was not paused"
    emit(as_json, {"queue": queue, "paused": False, "was_paused": was}, human)


@hold_command(on_queue=_pause_queue, warn=True)
def pause(app: Celery, task: str, key: str | None) -> BucketHold:
    """Release none of TASK's messages (or --key's, or --queue's) until `resume`; they
    wait in Redis, on every worker. A queue's messages sent without a countdown to tasks
    without limits still go straight to the broker."""
    return ops_pause.pause(app, task, key)


@hold_command(on_queue=_resume_queue)
def resume(app: Celery, task: str, key: str | None) -> BucketHold:
    """End a pause or a throttle of TASK (or --key's, or --queue's): its messages are
    released again, within its limits."""
    return ops_pause.resume(app, task, key)


@hold_command(
    click.argument("seconds", type=click.FloatRange(0, ops_pause.MOST_THROTTLE_SECONDS)),
    warn=True,
)
def throttle(app: Celery, task: str, key: str | None, seconds: float) -> BucketHold:
    """Release none of TASK's messages (or --key's) for SECONDS, on every worker. It
    never shortens a longer throttle or a pause."""
    return ops_pause.throttle(app, task, seconds, key)
