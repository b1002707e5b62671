"""``celery delayq rescue``: move ETA messages that vanilla publishers sent before the
switch into the delayed store (see ``celery_delayq.ops.rescue``)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import click

from ..config.errors import ConfigurationError
from ..ops.rescue import RescueProgress, RescueReport, rescue
from .render import current_app

UNACKED_WARNING = (
    "warning: an entry in 'unacked' whose worker is still alive is also held in that "
    "worker's memory; rescuing it then can run the task twice. Stop the old workers "
    "first, or pass --no-unacked."
)


class ProgressLines:
    """Progress as a line on stderr at most every ``interval`` seconds (long runs only)."""

    def __init__(self, verb: str, interval: float = 2.0) -> None:
        self.verb = verb
        self.interval = interval
        self.last = time.monotonic()

    def __call__(self, progress: RescueProgress) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        click.echo(
            f"{self.verb}: examined {progress.examined}, {progress.rescued} with a future ETA, "
            f"{progress.skipped} left alone (now {progress.source} {progress.key!r})",
            err=True,
        )


def describe(report: RescueReport) -> str:
    """The human summary of a rescue."""
    lines = [
        f"Rescued {report.rescued} message(s): {report.rescued_from_lists} from queue lists, "
        f"{report.rescued_from_unacked} from unacked.",
        f"Left alone: {report.skipped_not_delayed} not delayed, {report.skipped_gone} taken "
        f"by a worker meanwhile, {report.errors} unreadable (of {report.examined} examined).",
    ]
    lines += [f"  unreadable: {sample}" for sample in report.error_samples]
    return "\n".join(lines)


@click.command("rescue")
@click.option(
    "--queue",
    "-Q",
    "queues",
    multiple=True,
    help="Only this queue (repeatable); default: every queue of the app.",
)
@click.option(
    "--no-unacked",
    is_flag=True,
    help="Leave kombu's 'unacked' hash alone (while old workers still run).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
def rescue_command(queues: tuple[str, ...], no_unacked: bool, as_json: bool, yes: bool) -> None:
    """Move ETA messages sent by vanilla publishers into the delayed store.

    Run it once every publisher and worker uses the transport and the old workers are
    stopped, so that their held messages are back in the queue lists. Counts the
    candidates first and asks before moving anything (unless --yes).
    """
    app = current_app()
    options: dict[str, Any] = {"include_unacked": not no_unacked, "queues": list(queues) or None}
    if not no_unacked:
        click.echo(UNACKED_WARNING, err=True)
    try:
        found = rescue(app, dry_run=True, progress=ProgressLines("counting"), **options)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"Found {found.rescued} message(s) with a future ETA: {found.rescued_from_lists} in "
        f"queue lists, {found.rescued_from_unacked} in unacked (of {found.examined} examined).",
        err=True,
    )
    if found.rescued:
        if not yes:
            click.confirm("Move them into the delayed store?", abort=True, err=True)
        report = rescue(app, progress=ProgressLines("rescuing"), **options)
    else:
        report = dataclasses.replace(found, dry_run=False)  # nothing to move: the count says it all
    if as_json:
        click.echo(json.dumps({**report.as_dict(), "candidates": found.rescued}, indent=2))
    else:
        click.echo(describe(report))
