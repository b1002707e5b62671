"""A periodic entry as the store keeps it: checked when it is made, and written as JSON
that every beat reads back to the same schedule.

An entry comes from ``beat_schedule`` (``origin="settings"``: beat's start syncs those)
or from the API, CLI or web (``origin="api"``: kept across beat restarts). Its schedule is
one of Celery's: an interval (a ``timedelta``, a number of seconds or a
``celery.schedules.schedule``), a ``crontab`` or a ``solar``; or one of ours
(schedules/): a ``clocked`` instant, or an RFC 5545 rule (a ``dateutil`` rrule or its
text, kept as an ``rrule_schedule``). As in django-celery-beat, an entry may also have a
``start_time``, an ``expires`` (both instants), ``one_off`` and a ``description``, and a
``note`` on its pause (why it is paused: ``pause`` sets it, ``resume`` clears it); an entry
stored before these existed reads back as it was. Bad input is refused here with a
``ValueError`` that says which field is wrong, before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import crontab, schedule, solar
from dateutil.rrule import rrule

from .cron_times import as_utc
from .occurrences import Occurrences
from .schedules.clocked import clocked
from .schedules.rrules import as_rrule_schedule, rrule_schedule, wall_of
from .schedules.window import Window

__all__ = [
    "CATCH_UP_POLICIES",
    "ORIGINS",
    "OVERLAP_POLICIES",
    "PeriodicEntry",
    "entry_from_settings",
    "error_text",
    "schedule_from_json",
    "schedule_json",
]

#: What happens to occurrences missed while no beat wrote ahead (an outage longer than the
#: horizon): run the latest once (Celery's behaviour, the default), run each (up to a
#: bound), or skip to the next.
CATCH_UP_POLICIES = ("latest", "all", "none")
#: What a worker does with a run that would start while the entry's previous run is still
#: going: start it (Celery's behaviour, the default), or skip it (worker/periodic_runs.py).
OVERLAP_POLICIES = ("allow", "skip")
#: Where an entry came from: ``beat_schedule`` (synced at beat's start), run time, or
#: django-celery-beat's rows (contrib/django_celery_beat syncs those).
ORIGINS = ("settings", "api", "django")
#: apply_async options an entry may not set: each occurrence's ``eta`` is its time, and
#: Celery would count a ``countdown`` from when the occurrence is written ahead.
TIMED_OPTIONS = frozenset({"eta", "countdown"})
#: The longest entry name accepted (it is part of Redis keys and of every occurrence).
MAX_NAME_LENGTH = 200
#: The longest time zone name looked up (IANA's are under 40 characters).
MAX_ZONE_LENGTH = 100
#: The longest description accepted (free text for people; every beat reads it each pass).
MAX_DESCRIPTION_LENGTH = 1000
#: The longest pause note accepted (a line or two for people: why the entry is paused).
MAX_NOTE_LENGTH = 500
#: The keys of a ``beat_schedule`` item: Celery's, then ours, then django-celery-beat's.
SETTINGS_KEYS = frozenset(
    {"task", "schedule", "args", "kwargs", "options", "relative"}
    | {"timezone", "catch_up", "overlap"}
    | {"one_off", "start_time", "expires", "description"}
)

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
    overlap: str = "allow"  # "skip": no run starts while the previous one is going
    enabled: bool = True
    origin: str = "api"
    one_off: bool = False  # only the first occurrence runs; then the entry has ended
    start_time: datetime | None = None  # no occurrence before it
    expires: datetime | None = None  # no occurrence after it: then the entry has ended
    description: str = ""
    note: str = ""  # why it is paused, for people; kept with the pause until resumed

    def __post_init__(self) -> None:
        _check_text("name", self.name, MAX_NAME_LENGTH)
        _check_text("task", self.task, MAX_NAME_LENGTH)
        _check_choice("catch_up", self.catch_up, CATCH_UP_POLICIES)
        _check_choice("overlap", self.overlap, OVERLAP_POLICIES)
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
        self._check_bounds()
        if isinstance(self.schedule, (str, rrule, rrule_schedule)):  # kept as its text
            zone, start = zone_of(self.timezone), self.start_time or self.anchor
            rule = as_rrule_schedule(self.schedule, zone, wall_of(start, zone))
            object.__setattr__(self, "schedule", rule)
        schedule_json(self.schedule)  # a type of schedule it cannot keep is refused now,
        self.occurrences()  # so is one that can never match (30 February),
        self.to_json()  # and arguments that JSON cannot carry

    def _check_bounds(self) -> None:
        """``one_off``, ``start_time``, ``expires``, ``description`` and ``note``, checked;
        the times kept to the millisecond, as the anchor."""
        if not isinstance(self.one_off, bool):
            raise ValueError(f"one_off must be True or False, not {self.one_off!r}")
        for name in ("start_time", "expires"):
            moment = getattr(self, name)
            if moment is not None:
                if not isinstance(moment, datetime):
                    raise ValueError(f"{name} must be an aware datetime, not {moment!r}")
                object.__setattr__(self, name, from_ms(to_ms(as_utc(moment, name))))
        if self.start_time and self.expires and self.expires <= self.start_time:
            raise ValueError("expires must be after start_time")
        for name, longest in (("description", MAX_DESCRIPTION_LENGTH), ("note", MAX_NOTE_LENGTH)):
            if not isinstance(getattr(self, name), str) or len(getattr(self, name)) > longest:
                raise ValueError(f"{name} must be text of at most {longest} characters")

    def occurrences(self) -> Occurrences:
        """When this entry fires (the same answer in every beat), within its start time,
        its expiry and, for a one-off, its first occurrence.

        With a ``start_time``, an interval counts from it and first runs at it (as
        django-celery-beat runs it then), and a rule with no ``dtstart`` starts at it."""
        anchor = self.anchor
        if self.start_time is not None:
            every = schedule_json(self.schedule).get("every")
            anchor = self.start_time - timedelta(seconds=every or 0)
        window = Window(self.start_time, self.expires, self.one_off, self.anchor)
        return Occurrences(self.schedule, zone_of(self.timezone), anchor, window)

    def rhythm(self) -> str:
        """What the anchor is kept for across a change: the schedule, and the bounds that
        decide its first occurrence (a change of these starts the entry afresh)."""
        start = None if self.start_time is None else to_ms(self.start_time)
        return json.dumps([schedule_json(self.schedule), self.one_off, start], sort_keys=True)

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
                    **self._bounds_json(),
                },
                sort_keys=True,
                allow_nan=False,
            )
        except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: nested deep
            raise ValueError(f"entry {self.name!r} cannot be stored as JSON: {exc}") from None

    def _bounds_json(self) -> dict[str, Any]:
        """The fields added after the first release, left out at their defaults: an
        entry that uses none is stored as before, and reads the same in older beats."""
        found = {
            "one_off": self.one_off or None,
            "start_ms": None if self.start_time is None else to_ms(self.start_time),
            "expires_ms": None if self.expires is None else to_ms(self.expires),
            "description": self.description or None,
            "note": self.note or None,
            "overlap": None if self.overlap == "allow" else self.overlap,
        }
        return {key: value for key, value in found.items() if value is not None}

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
                overlap=data.get("overlap", "allow"),
                enabled=data["enabled"] is True,
                origin=data["origin"],
                one_off=data.get("one_off", False),
                start_time=_maybe_ms(data.get("start_ms")),
                expires=_maybe_ms(data.get("expires_ms")),
                description=data.get("description", ""),
                note=data.get("note", ""),
            )
        except Exception as exc:  # RecursionError (deep nesting), crontab's ParseException...
            raise ValueError(f"not a periodic entry: {error_text(exc)}") from None


def to_ms(moment: datetime) -> int:
    """``moment`` in milliseconds since the epoch, as the store keeps times."""
    return round(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """A time the store keeps, in milliseconds since the epoch, as a UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, timezone.utc)


def _maybe_ms(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def zone_of(name: str) -> ZoneInfo:
    """The IANA zone ``name``, or a ``ValueError`` naming it (a name the system cannot
    open as a file, too long or a folder's, is unknown too)."""
    if isinstance(name, str) and len(name) > MAX_ZONE_LENGTH:
        raise ValueError(f"unknown time zone {name[:MAX_ZONE_LENGTH]!r}...: too long a name")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError) as exc:
        raise ValueError(f"unknown time zone {name!r}: {exc}") from None


def schedule_json(entry_schedule: Any) -> dict[str, Any]:
    """A schedule as JSON-ready data (``schedule_from_json`` reverses it)."""
    if isinstance(entry_schedule, clocked):
        return {"clocked": to_ms(entry_schedule.at)}
    if isinstance(entry_schedule, rrule_schedule):
        start = entry_schedule.dtstart
        return {
            "rrule": entry_schedule.rule,
            "dtstart": None if start is None else start.isoformat(),
        }
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
    hint = ": wrap it in clocked(...)" if isinstance(entry_schedule, datetime) else ""
    raise ValueError(
        f"a schedule is a crontab, a solar, a schedule, a timedelta, a number of seconds, a "
        f"clocked or an rrule, not {type(entry_schedule).__name__}{hint}"
    )


def schedule_from_json(data: Mapping[str, Any]) -> Any:
    """The schedule ``schedule_json`` wrote."""
    if "clocked" in data:
        return clocked(from_ms(data["clocked"]))
    if "rrule" in data:
        start = data["dtstart"]
        return rrule_schedule(data["rrule"], None if start is None else _wall(start))
    if "crontab" in data:
        fields = data["crontab"]
        return crontab(**{name: fields[name] for name in _CRONTAB_FIELDS})
    if "solar" in data:
        spec = data["solar"]
        return solar(spec["event"], spec["lat"], spec["lon"])
    if "every" in data:
        return schedule(timedelta(seconds=data["every"]), relative=data["relative"] is True)
    raise ValueError(f"not a schedule: {sorted(data)}")


def _wall(text: Any) -> datetime:
    """A stored wall time (ISO 8601, naive)."""
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is not None:
        raise ValueError(f"a rule's dtstart is a wall time, not {text!r}")
    return moment


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


def entry_from_settings(
    name: str, spec: Mapping[str, Any], zone: str, now: datetime
) -> PeriodicEntry:
    """A ``beat_schedule`` item as an entry (``zone``: the app's, unless it names one):
    Celery's keys (``task``, ``schedule``, ``args``, ``kwargs``, ``options``,
    ``relative``), ours (``timezone``, ``catch_up``, ``overlap``) and django-celery-beat's
    (``one_off``, ``start_time``, ``expires``, ``description``); a ``ValueError`` naming
    the entry for anything else.

    ``expires`` here is the entry's end, an aware datetime, as django-celery-beat's
    ``PeriodicTask.expires``; each message's expiry in seconds stays in ``options``, as
    Celery has it."""
    unknown = set(spec) - SETTINGS_KEYS
    if unknown:
        raise ValueError(f"beat_schedule[{name!r}]: unknown keys {sorted(unknown)}")
    try:
        rhythm = spec["schedule"]
        if spec.get("relative") and isinstance(rhythm, (int, float, timedelta)):
            seconds = rhythm if isinstance(rhythm, timedelta) else timedelta(seconds=rhythm)
            rhythm = schedule(seconds, relative=True)
        expires = spec.get("expires")
        if expires is not None and not isinstance(expires, datetime):
            raise ValueError(
                f"expires is the entry's end, an aware datetime, not {expires!r} (a message's "
                f"expiry in seconds goes in options)"
            )
        return PeriodicEntry(
            name=name,
            task=spec["task"],
            schedule=rhythm,
            anchor=now,
            timezone=spec.get("timezone") or zone,
            args=tuple(spec.get("args") or ()),
            kwargs=dict(spec.get("kwargs") or {}),
            options=dict(spec.get("options") or {}),
            catch_up=spec.get("catch_up", "latest"),
            overlap=spec.get("overlap", "allow"),
            origin="settings",
            one_off=spec.get("one_off", False),
            start_time=spec.get("start_time"),
            expires=expires,
            description=spec.get("description", ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"beat_schedule[{name!r}]: {exc}") from None
