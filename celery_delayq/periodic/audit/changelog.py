"""Each periodic entry's change log: who changed it, when, through what, and what changed.

``{P:periodic}:changes:<name>`` (core/layout/keys.py) is a list, newest first, of one JSON
record per change: ``at`` (UTC ms), ``who``, ``via`` (actors.py's ``INTERFACES``),
``action``, the ``version`` the change took, ``changes`` (each field that changed: its
old and new value as JSON text, each cut to ``MAX_VALUE`` characters) and a ``detail``.
A change and its record are one script call (core/lua/swap_field.lua), in the slot of
``P:periodic``: no change goes unrecorded, nor a record of a change that did not land.
Each write keeps the newest ``MAX_CHANGES`` records and makes the list expire
``MAX_AGE`` after it; a read leaves out records older than ``MAX_AGE``. The bytes read
back may be anyone's: a record that cannot be read is an ``UnreadableRecord``, never an
error, as is a log key of another type, which the next change replaces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Union

import redis
from celery import Celery

from ...brokers.connect import open_store
from ...core.layout.keys import KeySpace
from ..entry import from_ms, to_ms
from .actors import Actor, current_actor

__all__ = [
    "MAX_AGE",
    "MAX_CHANGES",
    "ChangeLog",
    "ChangeRecord",
    "UnreadableRecord",
    "changes",
]

#: The most records kept of one entry: its newest changes.
MAX_CHANGES = 100
#: How long a record is kept, and the log of an entry after its last change.
MAX_AGE = timedelta(days=90)
#: The most characters kept of each old and new value, of ``who`` and of ``detail``.
MAX_VALUE = 120
#: A stored record longer than this (bytes) is not read.
MAX_RECORD_BYTES = 16_384
#: The most fields one record names, and the most characters of its changes as stored:
#: what a change replaces may be anyone's bytes, of any size (the rest are counted).
MAX_CHANGED_FIELDS = 32
MAX_CHANGES_TEXT = 8_000
#: The stored fields a record does not compare: the name is the log's, and the anchor
#: (where an interval counts from) moves with the writer's choices, not a person's.
UNCOMPARED = frozenset({"name", "anchor_ms"})


@dataclass(frozen=True)
class ChangeRecord:
    """One change of an entry, as read back."""

    at: datetime  # UTC
    who: str
    via: str  # api, cli, dashboard, admin or settings
    action: str  # created, updated, paused, resumed, removed, ran now, imported...
    version: int | None  # the version the change took
    changed: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    detail: str = ""


@dataclass(frozen=True)
class UnreadableRecord:
    """A stored record that cannot be read (crafted, or written by other code), and why."""

    reason: str


#: One record as read.
Record = Union[ChangeRecord, UnreadableRecord]


def record_text(
    actor: Actor,
    action: str,
    changes: Mapping[str, list[str | None]],
    version: int | None,
    detail: str = "",
) -> str:
    """The record of ``actor``'s ``action`` making ``changes`` (``field_changes``), at
    this instant."""
    now = datetime.now(timezone.utc)
    return json.dumps(
        {
            "at": to_ms(now),
            "who": actor.who[:MAX_VALUE],
            "via": actor.via,
            "action": action,
            "version": version,
            "changes": dict(changes),
            "detail": (detail or actor.detail)[:MAX_VALUE],
        },
        sort_keys=True,
    )


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, list[str | None]]:
    """Each field whose value differs, with its old and new value as short JSON text
    (None: no such field); past ``MAX_CHANGED_FIELDS`` or ``MAX_CHANGES_TEXT``, a last
    field "…" counts the rest (a crafted record replaced may hold any number of fields,
    of any name)."""
    names = sorted((set(old) | set(new)) - UNCOMPARED)
    differ = [name for name in names if old.get(name) != new.get(name)]
    found: dict[str, list[str | None]] = {}
    size = 0
    for name in differ:
        pair = [_short(old, name), _short(new, name)]
        size += len(json.dumps({name[:MAX_VALUE]: pair}))
        if size > MAX_CHANGES_TEXT or len(found) == MAX_CHANGED_FIELDS:
            found["…"] = [None, f"{len(differ) - len(found)} more fields"]
            break
        found[name[:MAX_VALUE]] = pair
    return found


def _short(fields: Mapping[str, Any], name: str) -> str | None:
    if name not in fields:
        return None
    text = json.dumps(fields[name], sort_keys=True)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


class ChangeLog:
    """The change logs of the periodic entries of one store."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys

    def script_part(self, name: str, text: str) -> tuple[list[str], list[Any]]:
        """The keys and arguments core/lua/swap_field.lua adds to a change to record it."""
        keep = int(MAX_AGE.total_seconds() * 1000)
        return [self.keys.periodic_changes(name)], [text, MAX_CHANGES, keep]

    def append(self, name: str, text: str) -> None:
        """Record a change made by another call (a run sent now; a change whose log
        cannot share its slot): as swap_field.lua does, in one transaction (a key of
        that name of another type deleted first, as the script does)."""
        key = self.keys.periodic_changes(name)
        kind = self.client.type(key)
        if (kind.decode() if isinstance(kind, bytes) else kind) not in ("list", "none"):
            self.client.unlink(key)  # made by other code: the log starts anew
        with self.client.pipeline(transaction=True) as pipe:
            pipe.lpush(key, text)
            pipe.ltrim(key, 0, MAX_CHANGES - 1)
            pipe.pexpire(key, MAX_AGE)
            pipe.execute()

    def ran_now(self, name: str, version: int, task_id: str) -> None:
        """Record that whoever acts sent a run of ``name`` at once (the entry is left as
        it was, so this is a call of its own)."""
        self.append(name, record_text(current_actor(), "ran now", {}, version, f"task {task_id}"))

    def read(self, name: str, limit: int = MAX_CHANGES) -> list[Record]:
        """The newest ``limit`` records of the entry ``name`` (at most ``MAX_CHANGES``),
        newest first; those older than ``MAX_AGE`` left out."""
        count = max(0, min(limit, MAX_CHANGES))
        key = self.keys.periodic_changes(name)
        try:
            found = self.client.lrange(key, 0, count - 1) if count else []
        except redis.ResponseError as exc:  # a key of that name, of another type
            if "WRONGTYPE" not in str(exc):
                raise
            return [UnreadableRecord("the log is not a list: the next change makes it anew")]
        since = datetime.now(timezone.utc) - MAX_AGE
        read = [parse(raw) for raw in found]
        return [each for each in read if not isinstance(each, ChangeRecord) or each.at >= since]


def parse(raw: bytes | str) -> Record:
    """One stored record, or why it cannot be read: any failure of any type is a reason."""
    if len(raw) > MAX_RECORD_BYTES:
        return UnreadableRecord(f"longer than {MAX_RECORD_BYTES} bytes")
    try:
        data = json.loads(raw)
        changes = data.get("changes", {})
        if not isinstance(changes, dict) or len(changes) > 64:
            raise ValueError("its changes are not a short JSON object")
        return ChangeRecord(
            at=from_ms(_int(data["at"], "at")),
            who=_text(data["who"], "who"),
            via=_text(data["via"], "via"),
            action=_text(data["action"], "action"),
            version=None if data.get("version") is None else _int(data["version"], "version"),
            changed={_text(k, "a field"): _pair(v) for k, v in changes.items()},
            detail=_text(data.get("detail", ""), "detail"),
        )
    except Exception as exc:  # RecursionError (deep nesting), OverflowError...
        return UnreadableRecord(f"{type(exc).__name__}: {str(exc)[:MAX_VALUE]}")


def _int(value: Any, name: str) -> int:
    if type(value) is not int or not 0 <= value < 10**18:
        raise ValueError(f"{name} is not a whole number")
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} is not text")
    return value[:MAX_VALUE]


def _pair(value: Any) -> tuple[str | None, str | None]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a change is not [old, new]")
    old, new = (None if each is None else _text(each, "a value") for each in value)
    return old, new


def changes(app: Celery, name: str, limit: int = MAX_CHANGES) -> list[Record]:
    """The change log of the entry ``name`` (kept after its removal), newest first: at
    most ``limit`` records, each a ``ChangeRecord`` or an ``UnreadableRecord``."""
    with open_store(app) as store:
        return ChangeLog(store.client, store.keys).read(name, limit)
