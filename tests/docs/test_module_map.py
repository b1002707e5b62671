"""The module map (docs/explanation/design.md) names only modules and folders that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "explanation" / "design.md"
#: A map entry: two-space steps of indentation, then one or more names ("a.py, b.py").
ENTRY = re.compile(r"^(?P<indent>(?:  ){1,3})(?P<names>[\w.]+/?(?:, [\w.]+/?)*)(?= |$)")


def map_entries() -> list[Path]:
    """Every path the map's tree names: each entry sits in the folder above it."""
    block = DESIGN.read_text().split("## Module map", 1)[1].split("```")[1]
    folders: list[tuple[int, Path]] = [(0, ROOT / "celery_delayq")]
    paths = []
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match is None:
            continue  # a description carried on to the next line
        depth = len(match["indent"]) // 2
        folders = [(d, folder) for d, folder in folders if d < depth]
        for name in match["names"].split(", "):
            path = folders[-1][1] / name.rstrip("/")
            paths.append(path)
            if name.endswith("/"):
                folders.append((depth, path))
    return paths


def test_every_module_the_map_names_exists() -> None:
    entries = map_entries()
    assert len(entries) > 40  # the map was read
    missing = [str(path.relative_to(ROOT)) for path in entries if not path.exists()]
    assert missing == []
