"""A periodic entry as the store keeps it: checked when it is made, and written as JSON
that every beat reads back to the same schedule.

An entry comes from ``beat_schedule`` (``origin="settings"``: beat's start syncs those)
or from the API, CLI or web (``origin="api"``: kept across beat restarts). Its schedule is
one of Celery's: an interval (a ``timedelta``, a number of seconds or a
``celery.schedules.schedule``), a ``crontab`` or a ``solar``. Bad input is refused here
with a ``ValueError`` that says which field is wrong, before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab, schedule, solar

from .cron_times import as_utc
from .occurrences import Occurrences

__all__ = [
    "CATCH_UP_POLICIES",
    "ORIGINS",
    "PeriodicEntry",
    "error_text",
    "schedule_from_json",
    "schedule_json",
]

#: What happens to occurrences missed while no beat wrote ahead (an outage longer than the
#: horizon): run the latest once (Celery's behaviour, the default), run each (up to a
#: bound), or skip to the next.
CATCH_UP_POLICIES = ("latest", "all", "none")
#: Where an entry came from: ``beat_schedule`` (synced at beat's start), run time, or
#: django-celery-beat's rows (contrib/django_celery_beat syncs those).
ORIGINS = ("settings", "api", "django")
#: apply_async options an entry may not set: each occurrence's ``eta`` is its time, and
#: Celery would count a ``countdown`` from when the occurrence is written ahead.
TIMED_OPTIONS = frozenset({"eta", "countdown"})
#: The longest entry name accepted (it is part of Redis keys and of every occurrence).
MAX_NAME_LENGTH = 200

_CRONTAB_FIELDS = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")


@dataclass(frozen=True)
class PeriodicEntry:
    """One periodic entry: which task, when (``schedule`` in ``timezone``), with what."""

    name: str
    task: str
    schedule: Any
    anchor: datetime
    timezone: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    catch_up: str = "latest"
    enabled: bool = True
    origin: str = "api"

    def __post_init__(self) -> None:
        _check_text("name", self.name, MAX_NAME_LENGTH)
        _check_text("task", self.task, MAX_NAME_LENGTH)
        _check_choice("catch_up", self.catch_up, CATCH_UP_POLICIES)
        _check_choice("origin", self.origin, ORIGINS)
        zone_of(self.timezone)
        if not isinstance(self.args, (list, tuple)):
            raise ValueError(f"args must be a list or a tuple, not {type(self.args).__name__}")
        if not isinstance(self.kwargs, Mapping) or not all(isinstance(k, str) for k in self.kwargs):
            raise ValueError("kwargs must be a mapping with string keys")
        if not isinstance(self.options, Mapping):
            raise ValueError("options must be a mapping")
        if TIMED_OPTIONS.intersection(self.options):
            raise ValueError("options may not set eta or countdown: the schedule says when")
        # to the millisecond, as the store keeps it: every beat reads back the same anchor,
        # and the same occurrences, as the process that wrote the entry
        object.__setattr__(self, "anchor", from_ms(to_ms(as_utc(self.anchor, "anchor"))))
        object.__setattr__(self, "args", tuple(self.args))
        schedule_json(self.schedule)  # a type of schedule it cannot keep is refused now,
        self.occurrences()  # so is one that can never match (30 February),
        self.to_json()  # and arguments that JSON cannot carry

    def occurrences(self) -> Occurrences:
        """When this entry fires (the same answer in every beat)."""
        return Occurrences(self.schedule, zone_of(self.timezone), self.anchor)

    def to_json(self) -> str:
        """The entry as the store keeps it."""
        try:
            return json.dumps(
                {
                    "name": self.name,
                    "task": self.task,
                    "schedule": schedule_json(self.schedule),
                    "anchor_ms": to_ms(self.anchor),
                    "timezone": self.timezone,
                    "args": list(self.args),
                    "kwargs": dict(self.kwargs),
                    "options": dict(self.options),
                    "catch_up": self.catch_up,
                    "enabled": self.enabled,
                    "origin": self.origin,
                },
                sort_keys=True,
                allow_nan=False,
            )
        except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested deep
            raise ValueError(f"entry {self.name!r} cannot be stored as JSON: {exc}") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> PeriodicEntry:
        """An entry read back from the store (checked again: the store's bytes may be
        anyone's, so any failure to read them, of any type, is a ``ValueError``)."""
        try:
            data = json.loads(text)
            return cls(
                name=data["name"],
                task=data["task"],
                schedule=schedule_from_json(data["schedule"]),
                anchor=from_ms(data["anchor_ms"]),
                timezone=data["timezone"],
                args=data["args"],
                kwargs=data["kwargs"],
                options=data["options"],
                catch_up=data["catch_up"],
                enabled=data["enabled"] is True,
                origin=data["origin"],
            )
        except Exception as exc:  # RecursionError (deep nesting), crontab's ParseException...
            raise ValueError(f"not a periodic entry: {error_text(exc)}") from None


def to_ms(moment: datetime) -> int:
    """``moment`` in milliseconds since the epoch, as the store keeps times."""
    return round(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """A time the store keeps, in milliseconds since the epoch, as a UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``, or a ``ValueError`` naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ValueError(f"unknown time zone {name!r}: {exc}") from None


def schedule_json(entry_schedule: Any) -> dict[str, Any]:
    """A Celery schedule as JSON-ready data (``schedule_from_json`` reverses it)."""
    if isinstance(entry_schedule, crontab):
        return {
            "crontab": {
                name: _cron_field_json(getattr(entry_schedule, f"_orig_{name}"))
                for name in _CRONTAB_FIELDS
            }
        }
    if isinstance(entry_schedule, solar):
        return {
            "solar": {
                "event": entry_schedule.event,
                "lat": entry_schedule.lat,
                "lon": entry_schedule.lon,
            }
        }
    if isinstance(entry_schedule, schedule):
        seconds = entry_schedule.run_every.total_seconds()
        return {"every": seconds, "relative": bool(entry_schedule.relative)}
    if isinstance(entry_schedule, timedelta):
        return {"every": entry_schedule.total_seconds(), "relative": False}
    if isinstance(entry_schedule, (int, float)) and not isinstance(entry_schedule, bool):
        return {"every": float(entry_schedule), "relative": False}
    raise ValueError(
        f"a schedule is a crontab, a solar, a schedule, a timedelta or a number of seconds, "
        f"not {type(entry_schedule).__name__}"
    )


def schedule_from_json(data: Mapping[str, Any]) -> Any:
    """The Celery schedule ``schedule_json`` wrote."""
    if "crontab" in data:
        fields = data["crontab"]
        return crontab(**{name: fields[name] for name in _CRONTAB_FIELDS})
    if "solar" in data:
        spec = data["solar"]
        return solar(spec["event"], spec["lat"], spec["lon"])
    if "every" in data:
        return schedule(timedelta(seconds=data["every"]), relative=data["relative"] is True)
    raise ValueError(f"not a schedule: {sorted(data)}")


def _cron_field_json(value: Any) -> str | int | list[int]:
    """A crontab field as written: its text, its number, or its numbers sorted (how it was
    written decides cron's DST rule: cron_times.follows_real_time)."""
    if isinstance(value, (str, int)):
        return value
    if isinstance(value, (Sequence, set, frozenset)):
        return sorted(int(each) for each in value)
    raise ValueError(f"a crontab field is text, a number or numbers, not {value!r}")


def error_text(exc: BaseException) -> str:
    """An error in a line of at most 200 characters (crafted bytes may be in it)."""
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:199] + "…"


def _check_text(name: str, value: Any, longest: int) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > longest:
        raise ValueError(f"{name} must be non-empty text of at most {longest} characters")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
