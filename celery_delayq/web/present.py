"""How task values read on a page: reprs pretty-printed, long values folded."""

from __future__ import annotations

import ast
import pprint
from dataclasses import dataclass

#: Values longer than this show their start, and unfold on a click (<details>).
FOLD_AT = 300


@dataclass(frozen=True)
class Folded:
    text: str
    preview: str  # the start of text when folded, else text itself

    @property
    def folded(self) -> bool:
        return self.preview != self.text


def pretty_repr(text: object) -> str:
    """A Python repr (Celery's argsrepr/kwargsrepr) laid out over lines when it is a
    literal; anything else as it is."""
    if text is None:
        return ""
    raw = str(text)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw
    return pprint.pformat(value, width=88, sort_dicts=False)


def folded_value(text: str) -> Folded:
    if len(text) <= FOLD_AT:
        return Folded(text, text)
    return Folded(text, text[:120].rstrip() + " …")
