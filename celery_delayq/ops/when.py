"""Moments and durations as operators read and write them, for the CLI and the web pages
alike."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone

DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_moment(value: str, now: float | None = None) -> float:
    """An ISO 8601 time (naive means UTC), or a duration from now such as ``90s``,
    ``15m``, ``2h``, ``1d``, as epoch seconds; ValueError saying what it accepts."""
    match = DURATION.match(value.strip())
    if match:
        number, unit = float(match.group(1)), match.group(2) or "s"
        moment = (time.time() if now is None else now) + number * UNIT_SECONDS[unit]
        return _dated(moment, value)
    try:
        parsed = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ValueError(f"{value!r} is neither ISO 8601 nor a duration like 15m") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return _dated(parsed.timestamp(), value)


def _dated(seconds: float, value: str) -> float:
    """``seconds`` when a date can hold it; else ValueError (not an OverflowError later)."""
    try:
        datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{value[:40]!r} is further away than a date can be") from None
    return seconds


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
