"""Every Lua script names what it includes in its header (``--! include <file>.lua``), and
the loader assembles it from those names alone: an include that names no file fails
here, as does a script whose assembled text is not its includes in header order."""

from __future__ import annotations

from pathlib import Path

import pytest

import celery_delayq
from celery_delayq.core import lua as core_lua
from celery_delayq.core.lua import (
    CORE_PACKAGE,
    SCRIPT_NAMES,
    find_lua,
    includes,
    script_source,
)

pytestmark = pytest.mark.unit

PACKAGE = Path(celery_delayq.__file__).parent
LUA_FILES = sorted(PACKAGE.rglob("lua/*.lua"))
#: Every script a client runs, by its package and name.
SCRIPTS = [
    *((CORE_PACKAGE, name) for name in SCRIPT_NAMES),
    ("celery_delayq.brokers.redis", "push_lists"),
    ("celery_delayq.brokers.redis", "consume"),
    ("celery_delayq.brokers.redis", "return_landed"),
    ("celery_delayq.brokers.redis", "name"),
    ("celery_delayq.ops.rescue", "rescue_list"),
    ("celery_delayq.ops.rescue", "rescue_unacked"),
]


def package_of(path: Path) -> str:
    return ".".join(("celery_delayq", *path.parent.parent.relative_to(PACKAGE).parts))


def header(text: str) -> list[str]:
    """The lines before the first line of code."""
    lines = text.splitlines()
    end = next((i for i, line in enumerate(lines) if line and not line.startswith("--")), None)
    return lines[:end]


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_include_names_a_file_that_exists(path: Path) -> None:
    for name in includes(path.read_text()):
        home, _ = find_lua(package_of(path), name)  # raises for a file found nowhere
        assert home in (package_of(path), CORE_PACKAGE)


@pytest.mark.parametrize("package, name", SCRIPTS, ids=lambda p: str(p))
def test_a_script_is_its_header_includes_in_order_then_its_own_code(
    package: str, name: str
) -> None:
    own = (PACKAGE.joinpath(*package.split(".")[1:]) / "lua" / f"{name}.lua").read_text()
    named = includes(own)
    assert includes("\n".join(header(own))) == named, "an include outside the header"
    assembled = script_source(package, name)
    assert "--! include" not in assembled
    position = 0
    for file in named:
        part = _assembled_file(package, file)
        found = assembled.find(part, position)
        assert found == position, f"{file} is not next in {name}"
        position += len(part)
    assert assembled[position:] == "".join(
        line + "\n" for line in own.splitlines() if not line.startswith("--! include")
    )


def _assembled_file(package: str, file: str) -> str:
    home, text = find_lua(package, file)
    for name in includes(text):
        text = text.replace(f"--! include {name}\n", _assembled_file(home, name), 1)
    return text


def test_a_missing_include_and_a_cycle_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(FileNotFoundError, match="nowhere.lua"):
        find_lua(CORE_PACKAGE, "nowhere.lua")
    files = {"a.lua": "--! include b.lua\nA\n", "b.lua": "--! include a.lua\nB\n"}
    monkeypatch.setattr(core_lua, "find_lua", lambda package, file: (package, files[file]))
    with pytest.raises(ValueError, match="a.lua -> b.lua -> a.lua"):
        core_lua._assemble(CORE_PACKAGE, "a.lua", ())


def test_include_lines_are_whole_lines() -> None:
    assert includes("--! include a.lua\n-- text\n--! include b-c.lua\n") == ["a.lua", "b-c.lua"]
    assert includes("-- --! include not_at_line_start.lua\n") == []
