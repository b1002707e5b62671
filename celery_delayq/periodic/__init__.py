"""Periodic entries kept in the store, written ahead by any number of beats.

``celery_delayq.periodic.upsert(app, name, task, schedule, ...)``, ``remove``, ``pause``,
``resume``, ``run_now``, ``get``, ``entries`` and ``listing`` (the entries, and the stored
records that cannot be read) manage them at run time (manage.py); ``changes`` reads an
entry's change log (audit/); the
modules below say when each occurrence falls (``cron_times``, ``occurrences``), how an
entry is kept (``entry``, ``registry``) and how beats write its occurrences ahead once
(``writer``); ``clocked(datetime)`` and ``rrule_schedule`` are schedule kinds beyond
Celery's (``schedules``). The API is imported on first use: ``cron_times`` needs the
standard library only.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_API = frozenset(
    {
        "upsert",
        "remove",
        "pause",
        "resume",
        "run_now",
        "get",
        "entries",
        "listing",
        "UnknownTaskWarning",
    }
)


#: The schedule kinds beyond Celery's, and the change log, by the module that defines each.
_SCHEDULES = {
    "clocked": ".schedules.clocked",
    "rrule_schedule": ".schedules.rrules",
    "changes": ".audit.changelog",
}


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(import_module(".manage", __name__), name)
    if name in _SCHEDULES:
        return getattr(import_module(_SCHEDULES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
