"""A ``beat_schedule`` module: what Celery's own beat (and delayq's) read from the app's
settings.

Export writes one for Celery's beat: Celery's keys only (``task``, ``schedule``, ``args``,
``kwargs``, ``options``), its schedules as Celery's constructors. It cannot say where an
interval counts from (Celery's beat counts from its start), nor keep a pause or an entry's
own time zone. Import reads the ``beat_schedule`` of a module (or a Django settings
module's ``CELERY_BEAT_SCHEDULE``) as delayq's beat reads it (``settings_entry``).
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
from .model import Export, Found, Incoming, Skipped, catch_up_note, read_each, unfit_elsewhere

#: The names a settings module gives the schedule: Celery's, Django's namespace, Celery 3's.
SCHEDULE_NAMES = ("beat_schedule", "CELERY_BEAT_SCHEDULE", "CELERYBEAT_SCHEDULE")
#: What Celery's beat is called in the reasons.
WHAT = "Celery's beat"
HEADER = '''"""Periodic entries exported by celery-delayq on {now}, for Celery's own beat.

Each interval counts from when beat starts; the crontabs are in the app's time zone ({zone}).
"""

from datetime import timedelta

from celery.schedules import crontab, schedule, solar

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
        notes += catch_up_note(entry, WHAT)
        lines.append(f"    {entry.name!r}: {{\n{_item(entry)}    }},\n")
    header = HEADER.format(now=now.isoformat(timespec="seconds"), zone=app.timezone)
    return Export(header + "".join(lines) + "}\n", skipped, notes)


def _item(entry: PeriodicEntry) -> str:
    """One entry's keys, as Python source."""
    item: dict[str, str] = {"task": repr(entry.task), "schedule": schedule_code(entry.schedule)}
    for key, value in (("args", list(entry.args)), ("kwargs", entry.kwargs)):
        if value:
            item[key] = repr(value)
    if entry.options:
        item["options"] = repr(dict(entry.options))
    return "".join(f"        {key!r}: {code},\n" for key, code in item.items())


def schedule_code(schedule: Any) -> str:
    """A schedule as the Python that makes it (``schedule_from_json`` reads it alike)."""
    data = schedule_json(schedule)
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
