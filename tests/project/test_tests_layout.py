"""The tests' own layout (CONTRIBUTING.md, "Tests"): every test module marks exactly one kind
in its ``pytestmark``, since CI picks its steps' tests by kind (``-m "unit and not slow"``)
and a module of no kind would drop out of them unseen; the folders by kind are gone
for good, the tests sitting in the folder of the module they are about; and the long
tests run first (tests/conftest.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ..helpers import REPO_ROOT

pytestmark = pytest.mark.unit

KINDS = {"unit", "integration", "system", "adversarial"}
TESTS = REPO_ROOT / "tests"


def module_marks(path: Path) -> set[str]:
    """The ``pytest.mark.<name>`` names in the module's ``pytestmark``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.attr
        for statement in tree.body
        if isinstance(statement, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in statement.targets)
        for node in ast.walk(statement.value)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    }


def test_the_scan_reads_single_and_listed_marks(tmp_path: Path) -> None:
    single, listed = tmp_path / "test_a.py", tmp_path / "test_b.py"
    single.write_text("import pytest\npytestmark = pytest.mark.unit\n")
    listed.write_text("import pytest\npytestmark = [pytest.mark.slow, pytest.mark.timeout(9)]\n")
    assert module_marks(single) == {"unit"}
    assert module_marks(listed) == {"slow", "timeout"}


def test_every_test_module_marks_one_kind() -> None:
    wrong = {
        str(path.relative_to(TESTS)): sorted(module_marks(path) & KINDS)
        for path in sorted(TESTS.rglob("test_*.py"))
        if len(module_marks(path) & KINDS) != 1
    }
    assert wrong == {}


def test_no_folder_by_kind() -> None:
    assert sorted(kind for kind in KINDS if (TESTS / kind).exists()) == []


def test_the_long_tests_are_collected_first_and_djangos_database_tests_before_them() -> None:
    """tests/flow/test_concurrency.py's chaos test (marked slow) is its last test, yet it
    is collected before the module's other tests, which keep their order; the Django
    site's database tests still lead, as pytest-django orders them."""
    django, flow = "tests/django/test_site.py", "tests/flow/test_concurrency.py"
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
        + [flow, django],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    ids = [line for line in collected if "::" in line]
    files = [nodeid.split("::", 1)[0] for nodeid in ids]
    assert files == sorted(files, key=lambda path: path != django)
    flow_tests = [nodeid.split("::", 1)[1] for nodeid in ids if nodeid.startswith(flow)]
    in_file = [
        node.name
        for node in ast.parse((REPO_ROOT / flow).read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    chaos = "test_chaos_a_worker_killed_every_few_seconds_never_lets_more_than_the_limit_run"
    assert in_file[-1] == chaos  # the last of its module: only the sort puts it first
    assert flow_tests == [chaos] + in_file[:-1]
