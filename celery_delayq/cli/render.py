"""What every command shares: the app from Celery's context, output as a table or JSON,
and how times and durations are written and read."""

from __future__ import annotations

import json
from typing import Any

import click
from celery import Celery

from ..ops.when import parse_moment

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def current_app() -> Celery:
    """The app of ``celery -A proj`` (Celery's CLI context object)."""
    app: Celery = click.get_current_context().find_root().obj.app
    return app


def emit(as_json: bool, data: Any, human: str) -> None:
    click.echo(json.dumps(data, indent=2, default=str) if as_json else human)


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [headers, *[[("" if c is None else str(c)) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(line.rstrip() for line in lines)


def printable(text: str) -> str:
    """``text`` with its non-printable characters escaped: a crafted record (or limit
    key) must not drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def moment(value: str | None) -> float | None:
    """An ISO 8601 time (naive means UTC), or a duration from now such as ``90s``,
    ``15m``, ``2h``, ``1d``; epoch seconds."""
    if value is None:
        return None
    try:
        return parse_moment(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def report_per_task(as_json: bool, verb: str, counts: dict[str, int]) -> None:
    """Print how many messages each task id had acted on; exit 1 if any had none."""
    lines = [
        f"{task_id}: {verb} {n} message(s)" if n else f"{task_id}: nothing pending"
        for task_id, n in counts.items()
    ]
    emit(as_json, counts, "\n".join(lines))
    if not all(counts.values()):
        raise SystemExit(1)
