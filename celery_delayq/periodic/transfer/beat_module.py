"""A ``beat_schedule`` module: what Celery's own beat (and delayq's) read from the app's
settings.

Export writes one for Celery's beat: Celery's keys (``task``, ``schedule``, ``args``,
``kwargs``, ``options``), its schedules as Celery's constructors. It cannot say where an
interval counts from (Celery's beat counts from its start), nor keep a pause or an entry's
own time zone. An entry with a ``clocked`` or rrule schedule, ``one_off``,
``start_time``, ``expires`` or a ``description`` is written with delayq's keys, which
only delayq's beat reads (Celery's refuses the item), and the export says so. An rrule
is written with its start (a ``DTSTART`` line): one that had none would otherwise start
again when imported. The module is ASCII (other text escaped): it is written in the
locale's encoding and read as UTF-8. Import reads the ``beat_schedule`` of a module (or a
Django settings module's ``CELERY_BEAT_SCHEDULE``) as delayq's beat reads it
(``settings_entry``).
"""

from __future__ import annotations

import runpy
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from celery import Celery
from celery.utils.imports import import_from_cwd

from ..entry import PeriodicEntry, schedule_json
from ..manage import EntryInfo, settings_entry
from ..schedules.rrules import rrule_schedule
from .model import (
    Export,
    Found,
    Incoming,
    Skipped,
    app_zone,
    policy_notes,
    read_each,
    rule_of,
    unfit_elsewhere,
)

#: The names a settings module gives the schedule: Celery's, Django's namespace, Celery 3's.
SCHEDULE_NAMES = ("beat_schedule", "CELERY_BEAT_SCHEDULE", "CELERYBEAT_SCHEDULE")
#: What Celery's beat is called in the reasons.
WHAT = "Celery's beat"
#: The keys only delayq's beat reads (entry.py's ``SETTINGS_KEYS``), in the order written.
OWN_KEYS = ("one_off", "start_time", "expires", "description")
HEADER = '''"""Periodic entries exported by celery-delayq on {now}, for Celery's own beat.

Each interval counts from when beat starts; the crontabs are in the app's time zone ({zone}).
An item with a clocked or rrule schedule, one_off, start_time, expires or a description
is read by delayq's beat only.
"""

from datetime import datetime, timedelta

from celery.schedules import crontab, schedule, solar
{more}
beat_schedule = {{
'''


def export(app: Celery, infos: list[EntryInfo], now: datetime) -> Export:
    """The module text defining ``beat_schedule`` with every entry Celery's beat can run."""
    lines, skipped, notes = [], [], []
    for info in infos:
        entry = info.entry
        reason = unfit_elsewhere(app, info, WHAT) or (
            None if entry.enabled else "paused: a beat_schedule entry cannot be paused"
        )
        if reason is not None:
            skipped.append(Skipped(entry.name, reason))
            continue
        notes += policy_notes(entry, WHAT) + _own_note(entry)
        lines.append(f"    {entry.name!a}: {{\n{_item(app, entry)}    }},\n")
    more = "".join(lines)
    imports = "\nfrom celery_delayq.periodic import clocked\n" if "clocked(" in more else ""
    header = HEADER.format(now=now.isoformat(timespec="seconds"), zone=app.timezone, more=imports)
    return Export(header + more + "}\n", skipped, notes)


def _own_note(entry: PeriodicEntry) -> list[str]:
    """The note for an item only delayq's beat reads: what of delayq's it holds."""
    kind = next(iter(schedule_json(entry.schedule)))
    own = {"clocked": ["a clocked schedule"], "rrule": ["an rrule schedule"]}.get(kind, [])
    own += [key for key in OWN_KEYS if getattr(entry, key)]
    if not own:
        return []
    return [f"{entry.name}: {', '.join(own)}: only delayq's beat reads it ({WHAT} refuses it)"]


def _item(app: Celery, entry: PeriodicEntry) -> str:
    """One entry's keys, as Python source."""
    item: dict[str, str] = {"task": ascii(entry.task), "schedule": schedule_code(entry)}
    for key, value in (("args", list(entry.args)), ("kwargs", entry.kwargs)):
        if value:
            item[key] = ascii(value)
    if entry.options:
        item["options"] = ascii(dict(entry.options))
    if isinstance(entry.schedule, rrule_schedule) and entry.timezone != app_zone(app):
        item["timezone"] = ascii(entry.timezone)  # a rule's wall times are in its zone
    for key in OWN_KEYS:
        value = getattr(entry, key)
        if value:
            item[key] = _moment_code(value) if isinstance(value, datetime) else ascii(value)
    return "".join(f"        {key!r}: {code},\n" for key, code in item.items())


def _moment_code(moment: datetime) -> str:
    return f"datetime.fromisoformat({moment.isoformat()!r})"


def schedule_code(entry: PeriodicEntry) -> str:
    """An entry's schedule as the Python that makes it (``schedule_from_json`` reads it
    alike; an rrule as its text, with its start)."""
    data = schedule_json(entry.schedule)
    if "clocked" in data:
        return f"clocked({_moment_code(entry.schedule.at)})"
    if "rrule" in data:
        rule, start = rule_of(entry)
        return repr(f"DTSTART:{start:%Y%m%dT%H%M%S}\nRRULE:{rule}")
    if "crontab" in data:
        fields = ", ".join(f"{key}={value!r}" for key, value in data["crontab"].items())
        return f"crontab({fields})"
    if "solar" in data:
        where = data["solar"]
        return f"solar({where['event']!r}, {where['lat']!r}, {where['lon']!r})"
    if data["relative"]:
        return f"schedule(timedelta(seconds={data['every']!r}), relative=True)"
    return repr(data["every"])


def beat_schedule_of(source: str) -> Mapping[str, Any]:
    """The schedule a module defines: ``source`` is a dotted name (imported as Celery
    imports, the current directory first) or the path of a ``.py`` file (run)."""
    from_file = source.endswith(".py")
    namespace = runpy.run_path(source) if from_file else vars(import_from_cwd(source))
    for name in SCHEDULE_NAMES:
        if isinstance(namespace.get(name), Mapping):
            return namespace[name]
    raise ValueError(f"{source} defines none of {', '.join(SCHEDULE_NAMES)}")


def read(app: Celery, schedule: Mapping[str, Any], now: datetime) -> list[Found]:
    """Each item of ``schedule`` as delayq's beat reads it, kept as an entry made at run
    time (``origin="api"``: a beat's own ``beat_schedule`` does not remove it)."""
    return [
        read_each(str(name), _reader(app, str(name), spec, now)) for name, spec in schedule.items()
    ]


def _reader(app: Celery, name: str, spec: Any, now: datetime) -> Any:
    def build() -> Incoming:
        entry = settings_entry(app, name, spec, now)
        return Incoming(replace(entry, origin="api"))

    return build
