"""How values read on a page: task reprs pretty-printed, long values folded, huge ones cut
(a page shows a bounded amount of any value, however large the task's arguments), and
moments in UTC."""

from __future__ import annotations

import ast
import pprint
from dataclasses import dataclass
from datetime import datetime, timezone

#: Values longer than this show their start, and unfold on a click (<details>).
FOLD_AT = 300
#: Reprs longer than this are shown as they are, not parsed to be laid out again:
#: ``ast.literal_eval`` of megabytes takes seconds and gigabytes.
PRETTY_MAX = 20_000
#: The most of one value a page shows; the rest is described, not sent.
SHOW_MAX = 20_000


@dataclass(frozen=True)
class Folded:
    text: str
    preview: str  # the start of text when folded, else text itself

    @property
    def folded(self) -> bool:
        return self.preview != self.text


def pretty_repr(text: object) -> str:
    """A Python repr (Celery's argsrepr/kwargsrepr) laid out over lines when it is a
    literal of at most PRETTY_MAX characters; anything else as it is."""
    if text is None:
        return ""
    raw = str(text)
    if len(raw) > PRETTY_MAX:
        return raw
    try:
        value = ast.literal_eval(raw)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return raw
    return pprint.pformat(value, width=88, sort_dicts=False)


def clipped(text: object, limit: int = SHOW_MAX) -> str:
    """``text`` whole up to ``limit`` characters, else its start and how long it is."""
    shown = str(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]} … [{len(shown):,} characters in all; the rest is not shown]"


def folded_value(text: str) -> Folded:
    text = clipped(text)
    if len(text) <= FOLD_AT:
        return Folded(text, text)
    return Folded(text, text[:120].rstrip() + " …")


def utc(moment: datetime | None) -> str:
    """A moment to the second, UTC (the footer says so), or "" for none."""
    if moment is None:
        return ""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
