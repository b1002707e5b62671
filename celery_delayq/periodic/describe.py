"""A periodic entry's schedule in words, as the CLI and the dashboard show it; and the
entry Celery's beat adds by itself, with why."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery

from .entry import PeriodicEntry, from_ms, schedule_json

__all__ = ["BACKEND_CLEANUP", "added_by_celery", "entry_text", "schedule_text"]

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
#: An rrule's FREQ as the unit it repeats by.
RULE_UNITS = {
    "YEARLY": "year",
    "MONTHLY": "month",
    "WEEKLY": "week",
    "DAILY": "day",
    "HOURLY": "hour",
    "MINUTELY": "minute",
    "SECONDLY": "second",
}
DAY_NAMES = {
    "MO": "Monday",
    "TU": "Tuesday",
    "WE": "Wednesday",
    "TH": "Thursday",
    "FR": "Friday",
    "SA": "Saturday",
    "SU": "Sunday",
}
MONTH_NAMES = (
    *("January", "February", "March", "April", "May", "June"),
    *("July", "August", "September", "October", "November", "December"),
)
#: The rule parts said in words; any other is shown as written.
_WORDED = {"FREQ", "INTERVAL", "BYDAY", "BYMONTH", "BYMONTHDAY", "BYHOUR", "BYMINUTE", "COUNT"}


def schedule_text(schedule: Mapping[str, Any], zone: str = "UTC") -> str:
    """A schedule as ``periodic.entry.schedule_json`` writes it, in words, its times in
    ``zone``: ``every 5 minutes``, ``crontab 0 9 * * mon-fri``, ``solar sunrise at 52.5,
    13.4``, ``once at 2026-12-01 09:00 Europe/Berlin``, ``every week on Monday (rrule)``."""
    if "crontab" in schedule:
        fields = schedule["crontab"]
        return "crontab " + " ".join(_cron_field(fields[name]) for name in CRON_ORDER)
    if "solar" in schedule:
        where = schedule["solar"]
        return f"solar {where['event']} at {where['lat']:g}, {where['lon']:g}"
    if "clocked" in schedule:
        return f"once at {_local(from_ms(schedule['clocked']), zone)}"
    if "rrule" in schedule:
        return _rule_words(schedule["rrule"], schedule.get("dtstart"), zone)
    text = f"every {_interval(float(schedule['every']))}"
    return text + (" (relative)" if schedule.get("relative") else "")


def entry_text(entry: PeriodicEntry) -> str:
    """The entry's schedule in words, then its bounds: ``every 1 hour; one-off; from
    2026-12-01 09:00 Europe/Berlin; until 2027-01-01 00:00 Europe/Berlin``."""
    words = [schedule_text(schedule_json(entry.schedule), entry.timezone)]
    if entry.one_off:
        words.append("one-off (its first occurrence only)")
    if entry.overlap == "skip":
        words.append("no overlap (a run is skipped while the previous one is going)")
    if entry.start_time is not None:
        words.append(f"from {_local(entry.start_time, entry.timezone)}")
    if entry.expires is not None:
        words.append(f"until {_local(entry.expires, entry.timezone)}")
    return "; ".join(words)


def _local(moment: datetime, zone: str) -> str:
    """``moment`` on the clocks of ``zone``, with the zone's name."""
    local = moment.astimezone(ZoneInfo(zone))
    shown = local.strftime("%Y-%m-%d %H:%M:%S" if local.second else "%Y-%m-%d %H:%M")
    return f"{shown} {zone}"


def _rule_words(rule: str, dtstart: str | None, zone: str) -> str:
    """An RRULE in words, as far as its common parts go; the rest as written."""
    parts = dict(part.split("=", 1) for part in rule.split(";") if "=" in part)
    unit = RULE_UNITS.get(parts.get("FREQ", ""), parts.get("FREQ", "?").lower())
    interval = parts.get("INTERVAL", "1")
    words = [f"every {unit}" if interval == "1" else f"every {interval} {unit}s"]
    if "BYMONTH" in parts:
        words.append("in " + _listed(parts["BYMONTH"], _month))
    if "BYMONTHDAY" in parts:
        words.append("on day " + parts["BYMONTHDAY"].replace(",", ", "))
    if "BYDAY" in parts:
        words.append("on " + _listed(parts["BYDAY"], _weekday))
    words += _times_of_day(parts.get("BYHOUR"), parts.get("BYMINUTE"))
    if parts.get("BYSECOND") == "0":  # on the minute: said by the times of day
        del parts["BYSECOND"]
    words += [f"{key}={value}" for key, value in parts.items() if key not in _WORDED]
    if "COUNT" in parts:
        words.append("once" if parts["COUNT"] == "1" else f"{parts['COUNT']} times")
    if dtstart is not None:
        start = datetime.fromisoformat(dtstart).replace(tzinfo=ZoneInfo(zone))
        words.append(f"from {_local(start, zone)}")
    return " ".join(words) + " (rrule)"


def _times_of_day(hours: str | None, minutes: str | None) -> list[str]:
    """``at 09:00, 17:00`` for hours and one minute; else each part as it is."""
    if hours is not None and minutes is not None and minutes.isdigit():
        return ["at " + _listed(hours, lambda hour: f"{int(hour):02}:{int(minutes):02}")]
    return [
        *([f"at hour {hours}"] if hours is not None else []),
        *([f"at minute {minutes}"] if minutes is not None else []),
    ]


def _listed(values: str, word: Any) -> str:
    return ", ".join(word(value) for value in values.split(","))


def _weekday(code: str) -> str:
    """``MO`` as Monday, ``+1MO`` as the 1st Monday, ``-1FR`` as the last Friday."""
    name = DAY_NAMES.get(code[-2:], code[-2:])
    nth = code[:-2]
    if not nth:
        return name
    number = int(nth)
    if number == -1:
        return f"the last {name}"
    if number < 0:
        return f"the {_ordinal(-number)} last {name}"
    return f"the {_ordinal(number)} {name}"


def _month(number: str) -> str:
    return MONTH_NAMES[int(number) - 1] if number.isdigit() and 1 <= int(number) <= 12 else number


def _ordinal(number: int) -> str:
    teen = 10 <= number % 100 <= 20
    suffix = "th" if teen else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


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
