"""celery-redbeat's form: one Redis hash per entry, ``<prefix><name>``, with a
``definition`` and a ``meta`` field in redbeat's JSON (its own encoder and decoder), and
the sorted set ``<prefix>:schedule`` of the keys by when each is due, which is what
redbeat's beat runs.

Export writes them as a JSON document (``keys``: each key's two fields and its score);
import reads them from a Redis, or from such a document. An interval's ``last_run_at``
is where it counts from, both ways. redbeat's ``rrule`` schedule is carried both ways
(redbeat_rules.py). redbeat has no clocked schedule, no solar one, no ``one_off``,
``start_time`` or ``expires``: an entry with one is not exported. Needs the
``celery-redbeat`` package.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import redis
from celery import Celery

from ..entry import PeriodicEntry, schedule_json, to_ms
from ..manage import EntryInfo
from .model import (
    Export,
    Found,
    Incoming,
    Skipped,
    app_zone,
    celery_schedule,
    celerys_own,
    every_of,
    last_run,
    policy_notes,
    read_each,
    unfit_elsewhere,
)
from .redbeat_rules import our_zone, their_rule

#: redbeat's default ``redbeat_key_prefix``.
DEFAULT_PREFIX = "redbeat:"
#: What the export document says it is (``format``).
FORMAT = "redbeat"
WHAT = "redbeat"


def schedule_key(prefix: str) -> str:
    """The sorted set of the keys redbeat runs (``RedBeatConfig.schedule_key``)."""
    return prefix + ":schedule"


def export(app: Celery, infos: list[EntryInfo], now: datetime, prefix: str) -> Export:
    """The keys redbeat's ``RedBeatSchedulerEntry.save()`` would write for each entry
    it can run, each due at the entry's next occurrence."""
    from redbeat.decoder import RedBeatJSONEncoder

    keys, skipped, notes = {}, [], []
    for info in infos:
        entry = info.entry
        reason = unfit_elsewhere(app, info, WHAT)
        try:
            their = None if reason else _their_schedule(app, entry, now)
        except ValueError as exc:
            reason = str(exc)
        if reason is not None:
            skipped.append(Skipped(entry.name, reason))
            continue
        notes += policy_notes(entry, WHAT)
        if entry.description:
            notes.append(f"{entry.name}: its description is not kept: redbeat has none")
        definition = {
            "name": entry.name,
            "task": entry.task,
            "args": list(entry.args),
            "kwargs": dict(entry.kwargs),
            "options": dict(entry.options),
            "schedule": their,
            "enabled": entry.enabled,
        }
        due = entry.occurrences().after(now)
        keys[prefix + entry.name] = {
            "definition": json.dumps(definition, cls=RedBeatJSONEncoder),
            "meta": json.dumps({"last_run_at": last_run(entry, now)}, cls=RedBeatJSONEncoder),
            "score": -1 if due is None else to_ms(due) // 1000,
        }
    document = {"format": FORMAT, "schedule_key": schedule_key(prefix), "keys": keys}
    return Export(json.dumps(document, indent=2) + "\n", skipped, notes)


def _their_schedule(app: Celery, entry: PeriodicEntry, now: datetime) -> Any:
    """The entry's schedule as redbeat stores it; a ``ValueError`` says why it cannot."""
    kind = next(iter(schedule_json(entry.schedule)))
    if kind in ("solar", "clocked"):
        raise ValueError(f"a {kind} schedule: redbeat has none")
    held = [name for name in ("one_off", "start_time", "expires") if getattr(entry, name)]
    if held:
        raise ValueError(f"{', '.join(held)}: redbeat's entries have none")
    if kind == "rrule":
        return their_rule(app, entry, now)
    return celery_schedule(entry)


def is_redbeat(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("format") == FORMAT


def read_document(app: Celery, document: Mapping[str, Any], now: datetime) -> list[Found]:
    """The entries of an export document."""
    found = []
    for key, fields in (document.get("keys") or {}).items():
        fields = fields if isinstance(fields, Mapping) else {}
        found.append(_read_key(app, str(key), fields.get("definition"), fields.get("meta"), now))
    return found


def read_redis(app: Celery, url: str, prefix: str, now: datetime) -> list[Found]:
    """The entries redbeat keeps in the Redis at ``url``: those its schedule set names,
    and, skipped, those with a definition it does not (redbeat does not run them)."""
    import redbeat  # noqa: F401 (an ImportError now, not one per key)

    with redis.Redis.from_url(url, decode_responses=True) as client:
        scheduled = sorted(client.zrange(schedule_key(prefix), 0, -1))
        found = []
        for key in scheduled:
            definition, meta = client.hmget(key, "definition", "meta")
            found.append(_read_key(app, key, definition, meta, now))
        pattern = re.sub(r"([\\*?\[\]])", r"\\\1", prefix) + "*"
        for key in sorted(set(client.scan_iter(match=pattern, _type="HASH")) - set(scheduled)):
            if client.hexists(key, "definition"):
                why = f"not in {schedule_key(prefix)}: redbeat does not run it"
                found.append(Skipped(key[len(prefix) :], why))
    return found


def _read_key(app: Celery, key: str, definition: Any, meta: Any, now: datetime) -> Found:
    from redbeat.schedulers import RedBeatSchedulerEntry

    def build() -> Found:
        if not definition:
            raise ValueError(f"{key} has no definition")
        data = RedBeatSchedulerEntry.decode_definition(definition)
        last = RedBeatSchedulerEntry.decode_meta(meta).get("last_run_at")
        return _incoming(app, data, last, now)

    return read_each(_name_of(key, definition), build)


def _name_of(key: str, definition: Any) -> str:
    """The entry's name: its definition's, else its key's."""
    try:
        return str(json.loads(definition)["name"])
    except Exception:
        return key


def _incoming(app: Celery, data: Mapping[str, Any], last: Any, now: datetime) -> Found:
    from redbeat.schedules import rrule

    name, schedule = str(data["name"]), data["schedule"]
    own = celerys_own(name, data["task"])
    if own is not None:
        return own
    zone, notes = app_zone(app), ""
    if isinstance(schedule, rrule):
        zone, notes = our_zone(app, name, schedule, now)
        schedule = schedule.rrule  # dateutil's, its start and end at their offset
    entry = PeriodicEntry(
        name=name,
        task=data["task"],
        schedule=schedule,
        anchor=last if isinstance(last, datetime) else now,
        timezone=zone,
        args=tuple(data.get("args") or ()),
        kwargs=dict(data.get("kwargs") or {}),
        options=dict(data.get("options") or {}),
        enabled=data.get("enabled", True) is not False,
    )
    if every_of(entry) is None or isinstance(last, datetime):
        said = (notes,) if notes else ()
        return Incoming(entry, anchored=every_of(entry) is not None, notes=said)
    never = f"{name}: it never ran in redbeat: its first run is one interval after the import"
    return Incoming(entry, notes=(never,))
