"""The promise ledger: every promise a user reads carries an id, and tests name the ids they
attack, so a reader goes from a promise to its proof in one step.

A promise is marked in Markdown with the ``promise`` role right after the sentence it labels::

    A crafted message goes to the dead letters. {promise}`poison-dead-lettered`

A test names the promises it attacks with ``@pytest.mark.promise("poison-dead-lettered")``
(on the test, its class, or ``pytestmark``). This module reads both sides from the source
files, with no import of either, for the docs build (the generated ledger page) and for the
check that fails on a promise without a test or a test naming an unknown promise
(``tests/docs/test_promises.py``). It needs nothing but the standard library.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path

ROLE = re.compile(r"\{promise\}`([^`]*)`")
ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
#: The ledger page itself: it shows an id as an example, and makes no promise.
LEDGER_PAGE = "docs/explanation/promises.md"
#: The kinds of test (their ``pytest.mark``, registered in pyproject.toml) that run real
#: processes (redis-server, RabbitMQ, celery worker or beat, a browser): only they can
#: attack a promise. A ``unit`` test runs no server.
ATTACKS = frozenset({"integration", "system", "adversarial"})


@dataclasses.dataclass(frozen=True)
class Promise:
    """One promise: its id, where it is made (path relative to the root, line) and its words
    (Markdown code spans kept in backticks, other markup gone)."""

    id: str
    path: str
    line: int
    text: str


def documents(root: Path) -> list[Path]:
    """The pages a user reads: the README, SECURITY.md and the documentation site."""
    pages = [root / "README.md", root / "SECURITY.md", *sorted((root / "docs").rglob("*.md"))]
    return [
        page
        for page in pages
        if page.is_file()
        and "_build" not in page.parts
        and page.relative_to(root).as_posix() != LEDGER_PAGE
    ]


CODE = re.compile(r"`[^`]*`")
#: A sentence ends at . ! or ? (and the end of any bold around it) before a capital, a
#: parenthesis or a code span; not at a colon or semicolon ("configured: HTTP basic auth
#: ...", "(doctor says so; `doctor` warns ...)" go on).
SENTENCE_END = re.compile(r"(?<=[.!?])(?:\*\*)?\s+(?=[A-Z(`])")


def _plain(markdown: str) -> str:
    """Markdown inline markup reduced to its words: roles go, links keep their text, bold
    and emphasis marks go; code spans stay as they are (a ```"*"``` keeps its star), for
    the ledger page to show them as code."""
    text = re.sub(r"\{[a-z-]+\}`[^`]*`", "", markdown)
    parts = re.split(r"(`[^`]*`)", text)
    for at in range(0, len(parts), 2):  # the prose between code spans
        prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", parts[at])
        parts[at] = re.sub(r"\*+", "", prose)
    return " ".join("".join(parts).split())


def _paragraph_before(lines: list[str], index: int, column: int) -> str:
    """The Markdown of the paragraph or list item that holds ``lines[index]``, up to
    ``column`` and after any promise made before in it."""
    start = index
    while start > 0 and lines[start - 1].strip() and not _starts_an_item(lines, start):
        start -= 1
    held = " ".join([*lines[start:index], lines[index][:column]])
    return ROLE.split(held)[-1].lstrip(" -*|")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _starts_an_item(lines: list[str], index: int) -> bool:
    """Whether ``lines[index]`` starts a list item or table row. A wrapped line that begins
    "400. " is no numbered item: an item's own lines are indented past its marker, and a
    numbered item follows another item, not a line of prose as far in."""
    current, before = lines[index].lstrip(), lines[index - 1]
    if current.startswith(("- ", "* ", "| ")):
        return True
    if not re.match(r"\d+\. ", current):
        return False
    return _indent(lines[index]) < _indent(before) or bool(
        _indent(lines[index]) == _indent(before) and re.match(r"\s*\d+\. ", before)
    )


def _table_cell(row: str, column: int) -> str:
    """In a table row, the cell up to ``column`` (after any promise made before in it),
    after the row's first cell, which names what the row is about."""
    cells = CODE.sub(lambda code: code.group().replace("|", "\0"), row[:column])
    found = [cell.replace("\0", "|") for cell in cells.strip().strip("|").split("|")]
    said = _plain(ROLE.split(found[-1])[-1])
    return f"{_plain(found[0])}: {said}" if len(found) > 1 else said


def _last_sentence(markdown: str) -> str:
    """The last sentence of ``markdown``, as words (no sentence ends inside a code span)."""
    spans: list[str] = []

    def hold(code: re.Match[str]) -> str:
        spans.append(code.group())
        return f"`\0{len(spans) - 1}\0`"

    held = CODE.sub(hold, markdown.strip())
    last = SENTENCE_END.split(held)[-1]
    return _plain(re.sub(r"`\0(\d+)\0`", lambda at: spans[int(at.group(1))], last))


def _promise_text(lines: list[str], index: int, column: int) -> str:
    """What the promise made at ``lines[index][column]`` says: its sentence, or in a table
    its row's subject and its cell."""
    if lines[index].lstrip().startswith("| "):
        return _table_cell(lines[index], column)
    return _last_sentence(_paragraph_before(lines, index, column))


def promises(root: Path) -> tuple[dict[str, Promise], list[str]]:
    """Every promise in the documents by id, and the problems found reading them (a malformed
    or repeated id)."""
    found: dict[str, Promise] = {}
    problems: list[str] = []
    for page in documents(root):
        relative = page.relative_to(root).as_posix()
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            for match in ROLE.finditer(line):
                promise_id, where = match.group(1), f"{relative}:{index + 1}"
                if not ID.fullmatch(promise_id):
                    problems.append(f"{where}: {promise_id!r} is no promise id (a-z, 0-9, -)")
                elif promise_id in found:
                    first = found[promise_id]
                    problems.append(
                        f"{where}: promise {promise_id!r} is made again"
                        f" (first in {first.path}:{first.line})"
                    )
                else:
                    text = _promise_text(lines, index, match.start())
                    found[promise_id] = Promise(promise_id, relative, index + 1, text)
    return found, problems


def _promise_ids(decorators: list[ast.expr]) -> Iterator[str]:
    """The string arguments of every ``pytest.mark.promise(...)`` among ``decorators``."""
    for node in decorators:
        for call in ast.walk(node):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "promise"
            ):
                for argument in call.args:
                    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                        yield argument.value


def _tests(tree: ast.Module) -> Iterator[tuple[str, list[ast.expr]]]:
    """Each test function's node id within its module, with the decorators that apply to it
    (its own, its class's and the module's ``pytestmark``)."""
    module_marks = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
    ]
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            yield node.name, [*module_marks, *node.decorator_list]
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for member in node.body:
                if isinstance(member, ast.FunctionDef) and member.name.startswith("test"):
                    marks = [*module_marks, *node.decorator_list, *member.decorator_list]
                    yield f"{node.name}::{member.name}", marks


def _mark_names(decorators: list[ast.expr]) -> set[str]:
    """The names of the ``pytest.mark.<name>`` among ``decorators``, called or not."""
    return {
        node.attr
        for decorator in decorators
        for node in ast.walk(decorator)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    }


def _named(root: Path) -> Iterator[tuple[str, str, set[str]]]:
    """Each promise id a test names, with the test (``path::name``) and its marks."""
    for path in sorted((root / "tests").rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=relative)
        for name, decorators in _tests(tree):
            for promise_id in _promise_ids(decorators):
                yield promise_id, f"{relative}::{name}", _mark_names(decorators)


def attacks(root: Path) -> dict[str, list[str]]:
    """For each promise id named by a test: the tests (``path::name``) that name it."""
    named: dict[str, list[str]] = {}
    for promise_id, test, _ in _named(root):
        named.setdefault(promise_id, []).append(test)
    return named


def problems(root: Path) -> list[str]:
    """What breaks the ledger: a promise no test attacks, a test naming an id no document
    makes, a promise attacked only by tests that run no server (no kind of ``ATTACKS``), a
    malformed or repeated id."""
    made, found = promises(root)
    named = attacks(root)
    running = {test for _, test, marks in _named(root) if marks & ATTACKS}
    for promise_id, promise in sorted(made.items()):
        tests = named.get(promise_id, [])
        real = [test for test in tests if test in running]
        if not tests:
            found.append(f"{promise.path}:{promise.line}: promise {promise_id!r} has no test")
        elif not real:
            found.append(
                f"{promise.path}:{promise.line}: promise {promise_id!r} is named only by"
                f" tests that run no server: {', '.join(tests)}"
            )
    for promise_id, tests in sorted(named.items()):
        if promise_id not in made:
            found.append(f"{tests[0]}: names promise {promise_id!r}, which no document makes")
    return found
