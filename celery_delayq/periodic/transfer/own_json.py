"""Our own form: every entry whole, as the store keeps it (its anchor, time zone,
``catch_up``, pause and origin included), so an import gives back the same entries."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..entry import PeriodicEntry
from ..manage import EntryInfo
from .model import Export, Found, Incoming, read_each

#: What the document says it is (``format``), and the version of its layout.
FORMAT, VERSION = "celery-delayq-periodic", 1


def export(infos: list[EntryInfo], now: datetime) -> Export:
    """Every entry of ``infos``, nothing left out."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": now.isoformat(),
        "entries": [json.loads(info.entry.to_json()) for info in infos],
    }
    return Export(json.dumps(document, indent=2) + "\n")


def is_ours(document: Any) -> bool:
    return isinstance(document, Mapping) and document.get("format") == FORMAT


def read(document: Mapping[str, Any]) -> list[Found]:
    """The entries of an export, each checked as the store checks what it reads."""
    if document.get("version") != VERSION:
        raise ValueError(f"a {FORMAT} document of version {document.get('version')!r}")
    return [_read_one(item) for item in document.get("entries") or []]


def _read_one(item: Any) -> Found:
    name = str(item.get("name")) if isinstance(item, Mapping) else repr(item)[:50]
    return read_each(name, lambda: Incoming(PeriodicEntry.from_json(json.dumps(item)), True))
