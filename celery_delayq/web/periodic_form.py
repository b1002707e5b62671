"""Adding and editing a periodic entry from the Periodic page: one form for an interval, a
crontab, a one-off time or an RFC 5545 rule, in a time zone picked from those this Python
knows, with the entry's arguments, options, bounds and description.

"Preview" checks the form as ``periodic.upsert`` checks an entry (the entry model, then
its message built as a beat builds it) and shows its next five runs in its zone and in
UTC, writing nothing; "Save" checks it again and calls ``upsert``. A field that cannot be
read, and each refusal of the entry model (its ``ValueError`` text), is said beside the
field it names, and nothing is written. The form is plain HTML (the pages run no script):
where the dashboard is read-only it is refused, and its posts carry the CSRF token, as
every action's do."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from functools import cache
from typing import Any, Union
from urllib.parse import unquote
from zoneinfo import ZoneInfo, available_timezones

from celery import Celery
from celery.schedules import crontab, schedule
from flask import Blueprint, flash, redirect, render_template, request, url_for

from ..periodic import manage
from ..periodic.audit import acting
from ..periodic.describe import entry_text, schedule_text
from ..periodic.entry import (
    CATCH_UP_POLICIES,
    MAX_NAME_LENGTH,
    OVERLAP_POLICIES,
    PeriodicEntry,
    from_ms,
    schedule_json,
    zone_of,
)
from ..periodic.schedules.clocked import clocked
from ..periodic.writer import OccurrenceWriter
from ..worker.poison import MAX_DEPTH, nested_deeper
from .actions import no_entry, writable
from .context import acting_user, context, problem

editing = Blueprint("editing", __name__)
editing.before_request(writable)

#: The schedule kinds the form makes, each with the field that gives it.
KINDS = {"interval": "every", "crontab": "cron", "clocked": "at", "rrule": "rrule"}
#: Every field of the form, as it names them.
FIELDS = (
    *("name", "task", "kind", "every", "relative", "cron", "at", "rrule", "timezone"),
    *("args", "kwargs", "options", "catch_up", "one_off", "start_time", "expires"),
    *("description", "overlap"),
)
#: The longest interval (Python's longest ``timedelta``), in seconds.
MOST_SECONDS = int(timedelta.max.total_seconds())
#: How many next runs a preview shows.
PREVIEWED = 5
#: The field a refusal of the entry model names, by how its text starts; the others are
#: the schedule's (an interval, a crontab, a rule, or a time that never comes).
BLAMED = {
    "name must": "name",
    "task must": "task",
    "unknown time zone": "timezone",
    "args must": "args",
    "kwargs must": "kwargs",
    "options must": "options",
    "options may": "options",
    "catch_up must": "catch_up",
    "overlap must": "overlap",
    "start_time must": "start_time",
    "expires must": "expires",
    "description must": "description",
    "entry ": "",  # cannot be stored as JSON: the form's, not one field's
}
#: The form's fields for a new entry.
BLANK = {
    "kind": "interval",
    "catch_up": "latest",
    "overlap": "allow",
    "args": "[]",
    "kwargs": "{}",
    "options": "{}",
}

#: An entry to edit, or the page that says why it cannot be.
Found = Union[PeriodicEntry, tuple[str, int]]


@dataclass
class Submitted:
    """A form as read: each field's text, the ``upsert`` arguments it gives, and what is
    wrong, by field ("" for the form as a whole)."""

    values: dict[str, str]
    fields: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)

    def read(self, name: str, parse: Callable[[str], Any]) -> Any:
        """The field ``name`` parsed, or None with why it cannot be."""
        try:
            return parse(self.values[name].strip())
        except (ValueError, OverflowError) as exc:
            self.errors[name] = str(exc)
            return None

    def blame(self, error: Exception) -> None:
        """Say the entry model's refusal beside the field it names."""
        text = str(error)
        found = [name for start, name in BLAMED.items() if text.startswith(start)]
        if not found and "MessageTooLarge" in text:  # the arguments make it so
            found = [max(("args", "kwargs"), key=lambda name: len(self.values[name]))]
        if not found and " refused: " in text and "never fires" not in text:
            found = ["options"]  # its message cannot be built: the routing options
        self.errors[found[0] if found else KINDS.get(self.values["kind"], "")] = text


def read_form(form: Mapping[str, str], zone: str, old: PeriodicEntry | None) -> Submitted:
    """The entry a submitted form describes (``old``: the entry edited, whose name,
    pause and pause note it keeps), with the fields that cannot be read."""
    got = Submitted({name: form.get(name, "") for name in FIELDS})
    got.values["timezone"] = got.values["timezone"] or zone
    known = got.read("timezone", zone_of) is not None
    zone = got.values["timezone"].strip() if known else "UTC"  # UTC: to say what else is wrong
    kind = got.values["kind"]
    relative = bool(got.values["relative"])
    if kind not in KINDS:
        got.errors["kind"] = f"pick one of {', '.join(KINDS)}"
    got.fields = {
        "name": got.values["name"] if old is None else old.name,
        "task": got.values["task"].strip(),
        "schedule": got.read(KINDS[kind], lambda text: schedule_of(kind, text, zone, relative))
        if kind in KINDS
        else None,
        "timezone": zone,
        "args": got.read("args", lambda text: json_of(text, [])),
        "kwargs": got.read("kwargs", lambda text: json_of(text, {})),
        "options": got.read("options", lambda text: json_of(text, {})),
        "catch_up": got.values["catch_up"] or "latest",
        "one_off": bool(got.values["one_off"]),
        "overlap": got.values["overlap"] or "allow",
        "start_time": got.read("start_time", lambda text: moment_of(text, zone) if text else None),
        "expires": got.read("expires", lambda text: moment_of(text, zone) if text else None),
        "description": got.values["description"].strip(),
        "enabled": True if old is None else old.enabled,
        "note": "" if old is None else old.note,
    }
    if old is not None:
        got.values["name"] = old.name
    return got


def schedule_of(kind: str, text: str, zone: str, relative: bool) -> Any:
    """The schedule a kind's field gives."""
    if not text:
        raise ValueError(f"give the {kind}'s {'time' if kind == 'clocked' else kind}")
    if kind == "interval":
        every = interval_of(text)
        return schedule(every, relative=True) if relative else every
    if kind == "crontab":
        fields = text.split()
        if len(fields) != 5:
            raise ValueError("a crontab is five fields: minute hour day-of-month month weekday")
        minute, hour, day, month, weekday = fields  # cron's order, not crontab()'s
        return crontab(minute, hour, weekday, day, month)
    if kind == "clocked":
        return clocked(moment_of(text, zone))
    return text  # the rule's text: the entry reads it


def interval_of(text: str) -> timedelta:
    """A number of seconds, as a ``timedelta``."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"an interval is a number of seconds, not {text!r}") from None
    if not math.isfinite(seconds):
        raise ValueError(f"an interval is a finite number of seconds, not {text!r}")
    try:
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ValueError(f"an interval is at most {MOST_SECONDS:,} seconds") from None


def moment_of(text: str, zone: str) -> datetime:
    """An ISO 8601 time (a browser's ``2030-06-01T09:00``); one with no offset is a time
    on the clocks of ``zone``."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"a time is ISO 8601 (2030-06-01T09:00), not {text!r}") from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(zone))
    try:
        moment.astimezone(timezone.utc)  # as the entry keeps it
    except OverflowError:
        raise ValueError(f"{text!r} in UTC is outside the years 1 to 9999") from None
    return moment


def json_of(text: str, empty: Any) -> Any:
    """A JSON value (``empty`` for no text); its type is the entry model's to check."""
    if not text:
        return empty
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if nested_deeper(MAX_DEPTH, value):  # a worker could not hand it to its pool
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")
    return value


def checked(app: Celery, got: Submitted, old: PeriodicEntry | None) -> PeriodicEntry | None:
    """The entry ``got`` describes, checked as ``upsert`` checks it (with the anchor
    ``upsert`` gives it: an unchanged rhythm keeps the old one), or None, its refusal
    said beside its field."""
    if got.errors:
        return None
    now = datetime.now(timezone.utc)
    try:
        entry = PeriodicEntry(anchor=now, **got.fields)
        if old is not None and old.rhythm() == entry.rhythm():
            entry = replace(entry, anchor=old.anchor)
        OccurrenceWriter(app).check(entry, now)
    except (ValueError, OverflowError) as exc:
        got.blame(exc)
        return None
    return entry


def next_runs(entry: PeriodicEntry, count: int = PREVIEWED) -> list[tuple[datetime, str]]:
    """The entry's next runs after now: each in UTC, and on its zone's clocks."""
    zone, occurrences = ZoneInfo(entry.timezone), entry.occurrences()
    runs: list[tuple[datetime, str]] = []
    last: datetime | None = datetime.now(timezone.utc)
    while last is not None and len(runs) < count:
        last = occurrences.after(last)
        if last is not None:
            runs.append((last, last.astimezone(zone).strftime("%a %Y-%m-%d %H:%M:%S %Z")))
    return runs


def values_of(entry: PeriodicEntry) -> dict[str, str]:
    """The form's fields for an entry, its schedule as the form writes it."""
    zone, data = entry.timezone, schedule_json(entry.schedule)
    values = {
        "name": entry.name,
        "task": entry.task,
        "timezone": zone,
        "args": json.dumps(list(entry.args), ensure_ascii=False),
        "kwargs": json.dumps(dict(entry.kwargs), ensure_ascii=False),
        "options": json.dumps(dict(entry.options), ensure_ascii=False),
        "catch_up": entry.catch_up,
        "one_off": "on" if entry.one_off else "",
        "overlap": entry.overlap,
        "start_time": local_text(entry.start_time, zone),
        "expires": local_text(entry.expires, zone),
        "description": entry.description,
    }
    if "every" in data:
        every = float(data["every"])
        values["every"] = str(int(every)) if every.is_integer() else repr(every)
        values.update(kind="interval", relative="on" if data["relative"] else "")
    elif "crontab" in data:
        values.update(kind="crontab", cron=schedule_text(data).removeprefix("crontab "))
    elif "clocked" in data:
        values.update(kind="clocked", at=local_text(from_ms(data["clocked"]), zone))
    else:  # a rule (a solar entry is not edited here: see ``editable``)
        rule, start = data["rrule"], data["dtstart"]
        begin = "" if start is None else f"DTSTART:{datetime.fromisoformat(start):%Y%m%dT%H%M%S}\n"
        values.update(kind="rrule", rrule=f"{begin}RRULE:{rule}")
    return values


def local_text(moment: datetime | None, zone: str) -> str:
    """``moment`` on the clocks of ``zone``, as a browser's time field holds it."""
    return "" if moment is None else f"{moment.astimezone(ZoneInfo(zone)):%Y-%m-%dT%H:%M:%S}"


def not_editable(entry: PeriodicEntry) -> str | None:
    """Why the form does not edit ``entry``, or None."""
    if entry.origin == "settings":
        return "it comes from beat_schedule, and a beat starting would write it back from there"
    if "solar" in schedule_json(entry.schedule):
        return "the form makes no solar schedule: change it with celery_delayq.periodic.upsert"
    return None


@cache
def zones() -> list[str]:
    """The IANA zones this Python knows (the system's, or the tzdata package's)."""
    return sorted(available_timezones())


def form_page(got: Submitted, old: PeriodicEntry | None, status: int = 200, **shown: Any) -> Any:
    """The form with ``got``'s fields and errors (``shown``: the preview)."""
    app = context().celery
    page = render_template(
        "periodic_form.html",
        values=got.values,
        errors=got.errors,
        old=old,
        kinds=KINDS,
        zones=zones(),
        catch_ups=CATCH_UP_POLICIES,
        overlaps=OVERLAP_POLICIES,
        tasks=sorted(name for name in app.tasks if not name.startswith("celery.")),
        **shown,
    )
    return page, status


def editable(name: str) -> Found:
    """The entry ``name`` to edit, or the page that says why there is none."""
    found = manage.get(context().celery, name) if len(name) <= MAX_NAME_LENGTH else None
    if found is None:
        return no_entry(name)
    why = not_editable(found.entry)
    if why is not None:
        return problem(409, "This entry is not edited here", f"{found.entry.name!r}: {why}.")
    return found.entry


def preview(got: Submitted, old: PeriodicEntry | None, entry: PeriodicEntry) -> Any:
    """The form again, with the entry's schedule in words and its next runs."""
    from_save = entry.start_time is None and (old is None or old.anchor != entry.anchor)
    return form_page(
        got,
        old,
        previewed=entry,
        words=entry_text(entry),
        runs=next_runs(entry),
        from_save=from_save and "every" in schedule_json(entry.schedule),
    )


@editing.get("/periodic/new")
def new() -> Any:
    zone = manage.app_zone(context().celery)
    return form_page(Submitted({**dict.fromkeys(FIELDS, ""), **BLANK, "timezone": zone}), None)


@editing.get("/periodic/edit")
def edit() -> Any:
    found = editable(request.args.get("name", ""))
    if isinstance(found, tuple):
        return found
    return form_page(Submitted(values_of(found)), found)


@editing.post("/periodic/save")
def save() -> Any:
    """Preview the entry the form describes, or save it (``do``), unless it is refused."""
    app = context().celery
    old = None
    if request.form.get("entry"):  # an edit: the entry's name, URL-quoted as the actions'
        found = editable(unquote(request.form["entry"]))
        if isinstance(found, tuple):
            return found
        old = found
    got = read_form(request.form, manage.app_zone(app), old)
    name = got.fields["name"]
    if old is None and isinstance(name, str) and name and manage.get(app, name) is not None:
        got.errors["name"] = f"an entry named {name!r} exists: edit it from the list"
    entry = checked(app, got, old)
    if entry is None:
        return form_page(got, old, 400)
    if request.form.get("do") != "save":
        return preview(got, old, entry)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", manage.UnknownTaskWarning)
        try:
            with acting(acting_user(), "dashboard"):
                manage.upsert(app, **got.fields)
        except ValueError as exc:  # changed since it was checked: said as the check says it
            got.blame(exc)
            return form_page(got, old, 400)
    flash(f"{'Saved' if old else 'Added'} periodic entry {name!r}.", "ok")
    for warning in caught:
        flash(str(warning.message)[:1].upper() + str(warning.message)[1:] + ".", "warn")
    return redirect(url_for("pages.periodic"))
