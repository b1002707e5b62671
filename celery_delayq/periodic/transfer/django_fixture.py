"""django-celery-beat's form: a ``PeriodicTask`` row and the row of its schedule
(``IntervalSchedule``, ``CrontabSchedule``, ``SolarSchedule`` or ``ClockedSchedule``).

Export writes a fixture of those rows for ``manage.py loaddata``; import reads such
rows, from a fixture or from the tables (contrib/django_beat_rows.py), as plain column
values. An interval's ``last_run_at`` (else its ``date_changed``, as the
``DatabaseScheduler`` counts) is where it counts from, both ways. A clocked schedule,
``one_off``, ``start_time``, ``expires`` and ``description`` are carried both ways
(``bounds``: the same reading the admin's sync makes of a row); an rrule has no row, and
an entry with one is not exported.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, schedule, solar

from ..entry import MAX_DESCRIPTION_LENGTH, PeriodicEntry, schedule_json
from ..manage import EntryInfo
from ..schedules.clocked import clocked
from .model import (
    Export,
    Found,
    Incoming,
    Skipped,
    app_zone,
    celerys_own,
    every_of,
    last_run,
    policy_notes,
    read_each,
    unfit_elsewhere,
)

APP = "django_celery_beat"
#: The schedule columns of a ``PeriodicTask``, each the name of its model (``<kind>schedule``).
KINDS = ("interval", "crontab", "solar", "clocked")
#: ``IntervalSchedule.period``'s choices from the largest, in seconds (and microseconds).
PERIODS = (("days", 86400), ("hours", 3600), ("minutes", 60), ("seconds", 1))
#: The apply_async options a ``PeriodicTask`` has a column for (``expires`` in seconds).
COLUMNS = ("queue", "exchange", "routing_key", "priority")
CRON_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
WHAT = "django-celery-beat"


@dataclass(frozen=True)
class TaskRow:
    """One ``PeriodicTask``'s columns (a foreign key as its row's pk), with the kind and
    the columns of its schedule's row."""

    fields: Mapping[str, Any]
    kind: str | None
    schedule: Mapping[str, Any]


def fixture_rows(objects: Any) -> list[TaskRow]:
    """The ``PeriodicTask`` rows of a fixture (``dumpdata``'s list), each with its
    schedule's row."""
    rows: dict[tuple[str, int | str], Mapping[str, Any]] = {}
    unkeyed = []  # tasks with no primary key: loaddata adds each
    for obj in objects:
        fields = obj.get("fields")
        fields = fields if isinstance(fields, Mapping) else {}
        key = _key(obj.get("model"), obj.get("pk"))
        if key is not None:
            rows[key] = fields  # a later object replaces one of the same key, as in loaddata
        elif obj.get("model") == f"{APP}.periodictask":
            unkeyed.append(fields)
    found = []
    tasks = [fields for (model, _), fields in rows.items() if model == f"{APP}.periodictask"]
    for fields in tasks + unkeyed:
        kind = next((k for k in KINDS if fields.get(k) is not None), None)
        key = _key(f"{APP}.{kind}schedule", fields.get(kind)) if kind else None
        found.append(TaskRow(fields, kind, rows.get(key, {}) if key else {}))
    return found


def _key(model: Any, pk: Any) -> tuple[str, int | str] | None:
    """An object's model and primary key (a number or text), or None for a crafted one
    (a list, a mapping, none): a row another can point to."""
    ok = isinstance(model, str) and isinstance(pk, (int, str)) and not isinstance(pk, bool)
    return (model, pk) if ok else None


def is_fixture(document: Any) -> bool:
    return isinstance(document, list) and all(isinstance(obj, Mapping) for obj in document)


def read(app: Celery, rows: list[TaskRow], now: datetime) -> list[Found]:
    """Each row as an entry, or why it cannot be one."""
    return [read_each(str(row.fields.get("name")), _reader(app, row, now)) for row in rows]


def _reader(app: Celery, row: TaskRow, now: datetime) -> Any:
    def build() -> Found:
        fields = row.fields
        own = celerys_own(str(fields.get("name")), str(fields.get("task")))
        if own is not None:
            return own
        entry = PeriodicEntry(
            name=fields["name"],
            task=fields["task"],
            schedule=_schedule(row.kind, row.schedule),
            anchor=now,
            timezone=str(row.schedule.get("timezone") or app_zone(app)),
            args=json.loads(fields.get("args") or "[]"),
            kwargs=json.loads(fields.get("kwargs") or "{}"),
            options=_options(fields),
            enabled=fields.get("enabled", True) is not False,
            **bounds(fields),
        )
        return _ran_once(_anchored(entry, fields, now), fields)

    return build


def _ran_once(incoming: Incoming, fields: Mapping[str, Any]) -> Incoming:
    """A one-off row that has run (``total_run_count``) runs no more there:
    ``DatabaseScheduler`` disables it at its next check instead. Kept paused, said; and
    a description cut to the length kept here, said too."""
    entry, notes = incoming.entry, incoming.notes
    if len(str(fields.get("description") or "")) > MAX_DESCRIPTION_LENGTH:
        notes += (f"{entry.name}: its description is cut to {MAX_DESCRIPTION_LENGTH:,} characters",)
    runs = fields.get("total_run_count")
    if entry.one_off and entry.enabled and isinstance(runs, int) and runs > 0:
        entry = replace(entry, enabled=False)
        notes += (
            f"{entry.name}: a one-off that has run there (total_run_count {runs}): kept "
            "paused, as django-celery-beat disables it",
        )
    return replace(incoming, entry=entry, notes=notes)


def bounds(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A ``PeriodicTask``'s ``one_off``, ``start_time``, ``expires`` (its end, a time)
    and ``description`` as the entry's own fields: the one reading of them, which the
    admin's sync (contrib/django_celery_beat/rows.py) makes too."""
    return {
        "one_off": bool(fields.get("one_off")),
        "start_time": moment(fields.get("start_time")),
        "expires": moment(fields.get("expires")),
        "description": str(fields.get("description") or "")[:MAX_DESCRIPTION_LENGTH],
    }


def _schedule(kind: str | None, row: Mapping[str, Any]) -> Any:
    if kind == "interval":
        return schedule(timedelta(**{row["period"]: row["every"]}))
    if kind == "crontab":
        return crontab(**{name: row[name] for name in CRON_FIELDS})
    if kind == "solar":
        return solar(row["event"], float(row["latitude"]), float(row["longitude"]))
    at = moment(row["clocked_time"]) if kind == "clocked" else None
    if at is not None:
        return clocked(at)
    raise ValueError(f"no schedule row ({kind or 'none'} found)")


def _options(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The apply_async options ``DatabaseScheduler`` sends the task with."""
    options = {name: fields[name] for name in COLUMNS if fields.get(name) not in (None, "")}
    headers = json.loads(fields.get("headers") or "{}")
    if headers:
        options["headers"] = headers
    if fields.get("expire_seconds"):
        options["expires"] = fields["expire_seconds"]
    return options


def _anchored(entry: PeriodicEntry, fields: Mapping[str, Any], now: datetime) -> Incoming:
    """An interval runs first at a start time still to come (the entry's own), else
    counts from its last run (``date_changed`` if none, as ``DatabaseScheduler``
    counts): a start time passed is then not kept, since an interval here counts from
    its start time."""
    start = entry.start_time
    if every_of(entry) is None or (start is not None and start > now):
        return Incoming(entry)
    anchor = moment(fields.get("last_run_at")) or moment(fields.get("date_changed")) or now
    notes: tuple[str, ...] = ()
    if start is not None:
        notes = (
            f"{entry.name}: its start_time {start.isoformat()} has passed: not kept, the "
            "interval counts from its last run there",
        )
    return Incoming(replace(entry, anchor=anchor, start_time=None), True, notes)


def moment(value: Any) -> datetime | None:
    """A fixture's time (ISO 8601) or a column's (a datetime, aware)."""
    if value is None or isinstance(value, datetime):
        return value
    found = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if found.tzinfo is None:  # the site's TIME_ZONE, which a fixture does not say
        raise ValueError(
            f"{value!r} has no UTC offset (a site with USE_TZ = False): import the rows "
            "with --django-settings, which reads it in the site's TIME_ZONE"
        )
    return found


def export(app: Celery, infos: list[EntryInfo], now: datetime) -> Export:
    """A fixture of the rows ``DatabaseScheduler`` runs each entry from."""
    objects: list[dict[str, Any]] = []
    schedules: dict[tuple[str, str], int] = {}
    skipped, notes = [], []
    for info in infos:
        entry = info.entry
        reason = unfit_elsewhere(app, info, WHAT, own_zones=True) or _unfit(entry)
        if reason is not None:
            skipped.append(Skipped(entry.name, reason))
            continue
        notes += policy_notes(entry, WHAT)
        ended = entry.enabled and entry.occurrences().after(now) is None
        if ended:
            notes.append(
                f"{entry.name}: it has no run left: written disabled (django-celery-beat "
                "would run a one-off or a clocked task again)"
            )
        kind, row = _schedule_row(entry)
        key = (kind, json.dumps(row, sort_keys=True))
        if key not in schedules:
            schedules[key] = len([k for k in schedules if k[0] == kind]) + 1
            objects.append({"model": f"{APP}.{kind}schedule", "pk": schedules[key], "fields": row})
        pk = len([o for o in objects if o["model"] == f"{APP}.periodictask"]) + 1
        task = _task_row(entry, kind, schedules[key], now)
        task["enabled"] = entry.enabled and not ended
        objects.append({"model": f"{APP}.periodictask", "pk": pk, "fields": task})
    return Export(json.dumps(objects, indent=2) + "\n", skipped, notes)


def _unfit(entry: PeriodicEntry) -> str | None:
    data = schedule_json(entry.schedule)
    if data.get("relative"):
        return "a relative interval: django-celery-beat has none"
    if "rrule" in data:
        return "an rrule schedule: django-celery-beat has none"
    if entry.expires is not None and "expires" in entry.options:
        return (
            "both an end (expires) and each message's expiry (options expires): "
            "django-celery-beat keeps one of them"
        )
    extra = set(entry.options) - {*COLUMNS, "headers", "expires"}
    expires = entry.options.get("expires")
    if expires is not None and not isinstance(expires, int):
        extra.add("expires")  # a time, not seconds: its column stops the task as well
    if extra:
        return f"options {sorted(extra)}: django-celery-beat has no column for them"
    return None


def _schedule_row(entry: PeriodicEntry) -> tuple[str, dict[str, Any]]:
    data = schedule_json(entry.schedule)
    if "clocked" in data:
        return "clocked", {"clocked_time": entry.schedule.at.isoformat()}
    if "crontab" in data:
        cron = {name: _cron_text(value) for name, value in data["crontab"].items()}
        return "crontab", {**cron, "timezone": entry.timezone}
    if "solar" in data:
        where = data["solar"]
        place = {"latitude": f"{where['lat']:.6f}", "longitude": f"{where['lon']:.6f}"}
        return "solar", {"event": where["event"], **place}
    return "interval", interval_row(data["every"])


def interval_row(seconds: float) -> dict[str, Any]:
    """An interval in ``IntervalSchedule``'s whole periods: the largest that divides it."""
    for period, size in PERIODS:
        if seconds == int(seconds) and int(seconds) % size == 0:
            return {"every": int(seconds) // size, "period": period}
    return {"every": round(seconds * 1_000_000), "period": "microseconds"}


def _cron_text(value: Any) -> str:
    return ",".join(str(each) for each in value) if isinstance(value, list) else str(value)


def _task_row(entry: PeriodicEntry, kind: str, pk: int, now: datetime) -> dict[str, Any]:
    options = dict(entry.options)
    return {
        "name": entry.name,
        "task": entry.task,
        **{each: pk if each == kind else None for each in KINDS},
        "args": json.dumps(list(entry.args)),
        "kwargs": json.dumps(dict(entry.kwargs)),
        **{name: options.get(name) for name in COLUMNS},
        "headers": json.dumps(options.get("headers") or {}),
        "expires": _iso(entry.expires),
        "expire_seconds": options.get("expires"),
        "one_off": entry.one_off or kind == "clocked",  # as django-celery-beat requires
        "start_time": _iso(entry.start_time),
        "enabled": entry.enabled,
        "last_run_at": last_run(entry, now).isoformat(),
        "total_run_count": 0,
        "date_changed": now.isoformat(),
        "description": entry.description,
    }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()
