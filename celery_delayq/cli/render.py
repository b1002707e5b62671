"""What every command shares: the app from Celery's context, output as a table or JSON,
and how times and durations are written and read."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from typing import Any

import click
from celery import Celery

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

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


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def ago(seconds: float) -> str:
    """A duration, short: ``42.0s``, ``1.5m``, ``2.0h``, ``3.1d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def due_in(due: float | None, now: float) -> str:
    if due is None:
        return "-"
    return f"in {ago(due - now)}" if due > now else "overdue"


def moment(value: str | None) -> float | None:
    """An ISO 8601 time (naive means UTC), or a duration from now such as ``90s``,
    ``15m``, ``2h``, ``1d``; epoch seconds."""
    if value is None:
        return None
    match = DURATION.match(value.strip())
    if match:
        number, unit = float(match.group(1)), match.group(2) or "s"
        return time.time() + number * UNIT_SECONDS[unit]
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither ISO 8601 nor a duration like 15m") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def report_per_task(as_json: bool, verb: str, counts: dict[str, int]) -> None:
    """Print how many messages each task id had acted on; exit 1 if any had none."""
    lines = [
        f"{task_id}: {verb} {n} message(s)" if n else f"{task_id}: nothing pending"
        for task_id, n in counts.items()
    ]
    emit(as_json, counts, "\n".join(lines))
    if not all(counts.values()):
        raise SystemExit(1)
