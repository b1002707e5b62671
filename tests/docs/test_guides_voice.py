"""The guides speak to users: instructions and reasons, not a lab notebook. A date, a commit
hash, a description of the machine something ran on, or of this repository's own tests
belongs on the benchmarks page (docs/explanation/benchmarks.md) or nowhere, never in
docs/guides."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .snippets import ROOT

pytestmark = pytest.mark.unit

GUIDES = ROOT / "docs" / "guides"

_MONTHS = (
    "January|February|March|April|May|June|July|August|September|October|November|December"
    "|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec"
)
#: Tokens removed before the checks: a UUID (a task id in sample output) is no hash, and a
#: timestamp in a command's sample output (``2026-11-21T12:36:31``) is output, not a note.
_NOT_NOTES = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:\d{2})?"
)
#: Hex words that look like hashes but are not (none yet; add with the reason).
NOT_HASHES: frozenset[str] = frozenset()

CHECKS: dict[str, re.Pattern[str]] = {
    "a date": re.compile(
        rf"\b\d{{4}}-\d{{2}}-\d{{2}}\b"
        rf"|\b(?:{_MONTHS})\.? \d{{1,2}}(?:st|nd|rd|th)?\b(?:,? \d{{4}})?"
        rf"|\b\d{{1,2}}(?:st|nd|rd|th)? (?:{_MONTHS})\b"
    ),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    "a machine": re.compile(r"\bvCPUs?\b|\bEPYC\b|\b\d+-core\b|\bVMs?\b"),
    "this repository's tests": re.compile(
        r"xfail|(?<![\w./])tests/|\btests\.[a-z_]+\.|\bour (?:own )?tests?\b|\bour test suite\b"
        r"|\bthe (?:project|repository)'s (?:own )?tests\b",
        re.IGNORECASE,
    ),
}


def notes_in(text: str) -> list[str]:
    """Each forbidden token of ``text``, as ``line N: what: token``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = _NOT_NOTES.sub(" ", line)
        for what, pattern in CHECKS.items():
            for match in pattern.finditer(line):
                if what == "a commit hash" and match.group() in NOT_HASHES:
                    continue
                found.append(f"line {number}: {what}: {match.group()!r}")
    return found


@pytest.mark.parametrize(
    "text",
    [
        "Movers built before commit 201d613 took such a record off.",
        "Measured on 2026-11-26 with celery-delayq 0.1.0.",
        "Since November 26, 2026, the mover does this.",
        "As of 3 March the default changed.",
        "On a 2-core AMD EPYC VM, 4 vCPUs, it took 22 s.",
        "A strict-xfail test records this.",
        "Run `python -m pytest tests/django` to check it.",
        "Our test suite starts a worker for it.",
        "The project's tests compare them byte for byte.",
        "deadbeef0c",
    ],
)
def test_each_kind_of_note_is_found(text: str) -> None:
    assert notes_in(text), text


@pytest.mark.parametrize(
    "text",
    [
        "37c5fdc4-ece3-406f-8bbe-b0f63a37b35b  proj.tasks.remember  2026-11-21T12:36:31.955+00:00",
        "Set `maxmemory 1073741824` and test your site's tasks with a real worker.",
        "A worker may run it; see `tests.py` in your app. Timestamps are in UTC.",
        "Write the tests of your own site in `myapp/tests/`, with a cafe and a bed.",
    ],
)
def test_instructions_and_sample_output_pass(text: str) -> None:
    assert notes_in(text) == []


@pytest.mark.parametrize("guide", sorted(GUIDES.rglob("*.md")), ids=lambda p: p.name)
def test_a_guide_carries_no_dates_machines_hashes_or_our_tests(guide: Path) -> None:
    assert notes_in(guide.read_text(encoding="utf-8")) == []
