"""Check the shell commands of the docs without running them.

- ``celery ...`` (also ``python -m celery ...``): the subcommands and options must exist in
  Celery's click command tree, which holds ``celery delayq`` through its entry point.
- ``python -m X``: X must be importable, or come with one of celery-delayq's extras;
  ``python path/to/script.py``: the file exists.
- ``pip install``: the extras of celery-delayq it names exist in setup.cfg.
- Anything else (``redis-server``, ``curl``, ``export``...) is left alone.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
import shlex
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[2]
_OPERATORS = {"&&", "||", ";", "|", "&"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class CommandError(AssertionError):
    """A documented command that would not work as written."""


def commands_of(block: str, language: str) -> list[str]:
    """The command lines of a block: a console block's ``$``-prompted lines, every
    line of a bash one; comments dropped, continued lines joined."""
    lines = []
    for raw in block.replace("\\\n", " ").splitlines():
        line = raw.strip()
        if language == "console":
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def check_block(block: str, language: str = "bash") -> None:
    for line in commands_of(block, language):
        for argv in _simple_commands(line):
            try:
                check_command(argv)
            except CommandError as exc:
                raise CommandError(f"{line!r}: {exc}") from None


def _simple_commands(line: str) -> list[list[str]]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars="&|;")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands: list[list[str]] = [[]]
    for word in lexer:
        if word in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [_without_assignments(argv) for argv in commands if argv]


def _without_assignments(argv: list[str]) -> list[str]:
    while argv and _ASSIGNMENT.match(argv[0]):
        argv = argv[1:]
    if argv[:1] == ["env"]:
        return _without_assignments(argv[1:])
    return argv


def check_command(argv: list[str]) -> None:
    if not argv:
        return
    program = Path(argv[0]).name
    if program == "celery":
        check_celery(argv[1:])
    elif re.fullmatch(r"python[0-9.]*", program):
        check_python(argv[1:])
    elif program in ("pip", "pip3") and argv[1:2] == ["install"]:
        check_pip_install(argv[2:])


def check_python(args: list[str]) -> None:
    if args[:1] == ["-m"] and len(args) > 1:
        module = args[1]
        if module == "pip" and args[2:3] == ["install"]:
            check_pip_install(args[3:])
        elif module == "celery":
            check_celery(args[2:])
        elif importlib.util.find_spec(module) is None and not _from_an_extra(module):
            raise CommandError(f"no module {module!r} to run with python -m")
    elif args and args[0].endswith(".py") and not (ROOT / args[0]).is_file():
        raise CommandError(f"no script {args[0]} in the repository")


def check_pip_install(args: list[str]) -> None:
    known = _extras()
    for requirement in args:
        match = re.fullmatch(r"(?:celery-delayq|celery_delayq|\.)\[([^\]]*)\]", requirement)
        if match:
            unknown = {e.strip() for e in match[1].split(",")} - known
            if unknown:
                raise CommandError(f"no extra {sorted(unknown)} in setup.cfg")


def _extras() -> set[str]:
    return set(_extras_require())


def _extras_require() -> configparser.SectionProxy:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config["options.extras_require"]


def _from_an_extra(module: str) -> bool:
    """Whether ``module``'s package comes with one of celery-delayq's extras (``python -m
    sphinx`` needs the docs extra, which a test run without it lacks)."""
    wanted = module.split(".")[0].replace("_", "-").lower()
    names = {
        re.split(r"[\s<>=!~;\[]", line.strip(), maxsplit=1)[0].lower()
        for requirements in _extras_require().values()
        for line in requirements.splitlines()
        if line.strip()
    }
    return wanted in names


def celery_command() -> click.Command:
    from celery.bin.celery import celery

    return celery


def check_celery(args: list[str]) -> None:
    """Walk Celery's command tree along ``args``: each subcommand must exist and each
    option must belong to the command it is given to (click's own parser, without
    running a callback or converting a value)."""
    command = celery_command()
    path = ["celery"]
    while True:
        context = click.Context(command, info_name=" ".join(path))
        try:
            _, rest, _ = command.make_parser(context).parse_args(list(args))
        except click.UsageError as exc:
            raise CommandError(f"{' '.join(path)}: {exc.format_message()}") from None
        if not isinstance(command, click.Group):
            if rest and not context.allow_extra_args:
                raise CommandError(f"{' '.join(path)}: unexpected arguments {rest}")
            return
        if not rest:
            return
        sub = command.get_command(context, rest[0])
        if sub is None:
            raise CommandError(f"{' '.join(path)} has no command {rest[0]!r}")
        command, path, args = sub, [*path, rest[0]], rest[1:]
