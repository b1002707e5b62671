"""Every caller outside the store reaches it through ``DelayedStore``'s own methods, never
through one of its facets (``store.dead.list(...)``): the facets are how the store splits
its work, and a caller that reaches one couples itself to that split."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from celery_delayq.core.lazy import first_use
from celery_delayq.core.store import DelayedStore

from ...helpers import REPO_ROOT

pytestmark = pytest.mark.unit

#: The facets: ``writes``, made with the store, and those it makes on first use
#: (heartbeats are no facet: the store hands out the movers' registry).
FACETS = {"writes"} | {
    name for name, value in vars(DelayedStore).items() if isinstance(value, first_use)
} - {"movers"}
STORE = REPO_ROOT / "celery_delayq" / "core" / "store"
SOURCES = [
    path
    for folder in ("celery_delayq", "tests", "benchmarks", "chaos")
    for path in sorted((REPO_ROOT / folder).rglob("*.py"))
    if STORE not in path.parents
]


def facet_calls(source: str) -> list[str]:
    """``x.<facet>.<method>(...)`` calls, ``self.<facet>`` excepted."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        holder = node.func.value
        if not isinstance(holder, ast.Attribute) or holder.attr not in FACETS:
            continue
        if not (isinstance(holder.value, ast.Name) and holder.value.id == "self"):
            found.append(f"line {node.lineno}: .{holder.attr}.{node.func.attr}(...)")
    return found


def test_the_scan_sees_the_facets() -> None:
    assert {"writes", "dead", "ahead", "moves"} <= FACETS
    assert facet_calls("store.dead.list('q')\nself.dead.list()\nstore.dead_letters()\n") == [
        "line 1: .dead.list(...)"
    ]


def test_no_caller_outside_the_store_reaches_a_facet() -> None:
    reaching = {
        str(path.relative_to(REPO_ROOT)): calls
        for path in SOURCES
        if path != Path(__file__) and (calls := facet_calls(path.read_text()))
    }
    assert reaching == {}
