"""The shell-command check of the docs (tests.docs.commands) accepts what works and
refuses what would not: unknown subcommands, options, modules, scripts and extras."""

from __future__ import annotations

import pytest

from .commands import CommandError, check_block, commands_of

pytestmark = pytest.mark.unit

GOOD = [
    "celery -A proj delayq status",
    "celery -A proj delayq list --queue default --limit 10 --json",
    "celery --app proj delayq dead resend --all",
    "celery -A proj worker -l INFO -Q default",
    "python -m celery -A proj delayq doctor --repair",
    "DELAYQ_WEB_TOKEN=secret celery -A proj delayq web --help",
    "python -m pytest -m 'not slow'",
    'pip install -e ".[test]" && python -m pytest',
    "pip install 'celery-delayq[web,prometheus]'",
    "redis-server --appendonly yes",
]

BAD = [
    ("celery -A proj delayq lsit", "no command 'lsit'"),
    ("celery -A proj delayq list --no-such-option", "--no-such-option"),
    ("celery -A proj delayq dead resend --yes", "--yes"),
    ("celery -A proj --bogus delayq status", "--bogus"),
    ("python -m celery_delayq.no_such_module", "no module"),
    ("python tools/no_such_script.py", "no script"),
    ("pip install 'celery-delayq[no-such-extra]'", "no extra"),
    ("redis-server & celery -A proj delayq mover --nope", "--nope"),
]


@pytest.mark.parametrize("command", GOOD)
def test_commands_that_work_pass(command: str) -> None:
    check_block(command)


@pytest.mark.parametrize(("command", "why"), BAD)
def test_commands_that_would_fail_are_refused(command: str, why: str) -> None:
    with pytest.raises(CommandError, match=why):
        check_block(command)


def test_console_blocks_check_prompted_lines_only() -> None:
    block = "$ celery -A proj delayq status\nqueue  pending\ncelery -A proj delayq lsit\n"
    assert commands_of(block, "console") == ["celery -A proj delayq status"]
    check_block(block, "console")
    with pytest.raises(CommandError):
        check_block("$ celery -A proj delayq lsit\n", "console")


def test_continued_lines_and_comments() -> None:
    block = "# a comment\ncelery -A proj delayq list \\\n    --queue default\n"
    assert commands_of(block, "bash") == ["celery -A proj delayq list      --queue default"]
    check_block(block)


def test_a_module_of_an_extra_not_installed_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m sphinx`` needs the docs extra, which a run of the tests may lack."""
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    check_block("python -m sphinx -W -n -b html docs docs/_build/html")
    with pytest.raises(CommandError, match="no module"):
        check_block("python -m no_such_tool")
