"""A periodic entry's schedule in words, as the CLI and the dashboard show it; and the
entry Celery's beat adds by itself, with why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import Celery

__all__ = ["BACKEND_CLEANUP", "added_by_celery", "schedule_text"]

#: The entry Celery's beat adds by itself (``Scheduler.install_default_entries``), as
#: delayq's beat does (beat.py), when ``result_expires`` is set and the result backend
#: does not expire results itself.
BACKEND_CLEANUP = "celery.backend_cleanup"
#: Why it is there, in one line, for an operator who did not write it.
BACKEND_CLEANUP_WHY = (
    "added by Celery: its beat deletes expired task results daily at 04:00, as "
    "result_expires is set and the result backend does not expire them itself"
)

#: Interval units, largest first, for a schedule in words.
UNITS = (("day", 86400), ("hour", 3600), ("minute", 60))
#: A crontab's fields in cron's own order (minute hour day-of-month month day-of-week).
CRON_ORDER = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def schedule_text(schedule: Mapping[str, Any]) -> str:
    """A schedule as ``periodic.entry.schedule_json`` writes it, in words: ``every 5
    minutes``, ``crontab 0 9 * * mon-fri``, ``solar sunrise at 52.5, 13.4``."""
    if "crontab" in schedule:
        fields = schedule["crontab"]
        return "crontab " + " ".join(_cron_field(fields[name]) for name in CRON_ORDER)
    if "solar" in schedule:
        where = schedule["solar"]
        return f"solar {where['event']} at {where['lat']:g}, {where['lon']:g}"
    text = f"every {_interval(float(schedule['every']))}"
    return text + (" (relative)" if schedule.get("relative") else "")


def _cron_field(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(each) for each in value)
    return str(value)


def _interval(seconds: float) -> str:
    for unit, size in UNITS:
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}" if count == 1 else f"{count} {unit}s"
    return "1 second" if seconds == 1 else f"{seconds:g} seconds"


def added_by_celery(app: Celery, name: str, origin: str) -> str | None:
    """Why the entry ``name`` is there though no one wrote it (one line), or None: beat
    adds ``celery.backend_cleanup`` to the settings' entries unless ``beat_schedule``
    names it."""
    if name != BACKEND_CLEANUP or origin != "settings":
        return None
    return None if name in (app.conf.beat_schedule or {}) else BACKEND_CLEANUP_WHY
