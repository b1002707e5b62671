"""Every file a Lua script's comments or a module's docstrings and comments name exists.

The Lua headers say which files assemble and include each script, and the Python
comments point at the scripts and modules that explain them; a file moved or renamed
leaves such a name behind, and a reader following it finds nothing. A file name is
looked up where a reader would look: beside the file that names it and in each folder
above it in the package (or their ``lua/`` folders), or from the repository's root; a
``celery_delayq.…`` path must import, down to its last name.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

import celery_delayq

from ..helpers import REPO_ROOT

pytestmark = pytest.mark.unit

PACKAGE = Path(celery_delayq.__file__).parent
#: A file name (``record.py``, ``lua/prelude.lua``, ``core/store/dead_letters.py``).
FILE_NAME = re.compile(r"(?<![\w/.{-])((?:[\w-]+/)*\w+\.(?:py|lua))\b")
#: A dotted module path inside the package (``celery_delayq.core.layout.record``).
MODULE_PATH = re.compile(r"\bcelery_delayq(?:\.\w+)+")


def lua_comments(path: Path) -> str:
    return "\n".join(line for line in path.read_text().splitlines() if "--" in line)


def python_prose(path: Path) -> str:
    """The docstrings and comments of a module."""
    source = path.read_text()
    tree = ast.parse(source)
    nodes = [tree, *ast.walk(tree)]
    docs = [
        ast.get_docstring(node, clean=False) or ""
        for node in nodes
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    comments = [token.string for token in tokens if token.type == tokenize.COMMENT]
    return "\n".join(docs + comments)


def places(path: Path) -> list[Path]:
    """Where a name written in ``path`` may be, relative to: its folder and each folder
    above it in the package, or their ``lua/`` folders; the store's ``lua/``; the
    repository's root."""
    above = list(path.parent.parents)  # a list: Python 3.9's parents take no slice
    folders = [path.parent, *above[: len(path.parent.relative_to(PACKAGE).parts)]]
    # core/lua too: a script's includes are looked for there after its own folder
    return [*folders, *(folder / "lua" for folder in folders), PACKAGE / "core" / "lua", REPO_ROOT]


def module_exists(dotted: str) -> bool:
    """``celery_delayq.a.b``: a module, or a name defined in one (``module.function``)."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        except Exception:  # it is there, but needs set-up to import (Django's settings)
            return importlib.util.find_spec(".".join(parts[:end])) is not None
        for name in parts[end:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def missing(path: Path, text: str) -> list[str]:
    names = [
        name
        for name in FILE_NAME.findall(text)
        if not any((place / name).is_file() for place in places(path))
    ]
    return names + [name for name in MODULE_PATH.findall(text) if not module_exists(name)]


SOURCES = sorted(PACKAGE.rglob("*.lua")) + sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_names_only_files_that_exist(path: Path) -> None:
    text = lua_comments(path) if path.suffix == ".lua" else python_prose(path)
    assert missing(path, text) == []


def test_the_scan_finds_stale_names() -> None:
    """The scan itself: names that exist pass, a stale one of each kind is reported."""
    lua = PACKAGE / "core" / "lua" / "prelude.lua"
    text = "-- core/lua/__init__.py puts it first; layout/record.py; lua/helpers.lua, helpers.lua\n"
    assert missing(lua, text) == []
    stale = "-- scripts.py puts it first (keyed.py, lua/gone.lua, core/dead_letters.py)\n"
    assert missing(lua, stale) == ["scripts.py", "keyed.py", "lua/gone.lua", "core/dead_letters.py"]
    module = PACKAGE / "brokers" / "redis" / "consume.py"
    assert missing(module, "see celery_delayq.core.layout.record.task_key") == []
    assert missing(module, "see celery_delayq.core.recorder") == ["celery_delayq.core.recorder"]
    nowhere = "celery_delayq.core.nowhere.thing"
    assert missing(module, nowhere) == [nowhere]
