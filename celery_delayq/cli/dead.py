"""``celery delayq dead``: messages that kept failing to reach the broker, or that a worker
could not read off its queue."""

from __future__ import annotations

from typing import Any

import click

from ..brokers.common.message import describe
from ..core.results import DeadLetter
from ..ops import api
from ..ops.when import iso
from .render import current_app, emit, json_option, table


def dead_json(letter: DeadLetter) -> dict[str, Any]:
    described = describe(letter.record.payload)
    return {
        "queue": letter.queue,
        "dead_at": iso(letter.dead_at),
        "tries": letter.tries,
        "reason": letter.reason,
        **described,
    }


def dead_table(letters: list[dict[str, Any]]) -> str:
    rows = [
        [d["id"], d["task"], d["queue"], d["dead_at"], d["tries"], d["reason"]] for d in letters
    ]
    return table(["task id", "task", "queue", "dead since (UTC)", "tries", "reason"], rows)


@click.group()
def dead() -> None:
    """Dead letters: messages the broker kept refusing, or a worker could not read (list
    them with `list --dead`)."""


def _selection(task_ids: tuple[str, ...], all_: bool) -> list[str] | None:
    if bool(task_ids) == all_:
        raise click.UsageError("give task ids or --all (not both)")
    return None if all_ else list(task_ids)


@dead.command()
@json_option
@click.argument("task_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
def resend(as_json: bool, task_ids: tuple[str, ...], all_: bool) -> None:
    """Schedule dead letters again, due now, and deliver them (fix the cause first).
    Counts those that left the dead letters; names each that is a dead letter still
    (its record cannot be read, or the broker refused it again) and then exits 1."""
    app = current_app()
    selection = _selection(task_ids, all_)
    chosen = _chosen(api.dead_letters(app), selection)
    api.resend_dead(app, selection)
    still = [
        _still_dead(letter, chosen[letter.queue, letter.key])
        for letter in api.dead_letters(app)
        if (letter.queue, letter.key) in chosen
    ]
    resent = len(chosen) - len(still)
    lines = [f"resent {resent}"]
    lines += [
        f"still dead ({d['why']}): {d['id']} of queue {d['queue']}: {d['reason']}" for d in still
    ]
    emit(as_json, {"resent": resent, "still_dead": still}, "\n".join(lines))
    if still:
        raise SystemExit(1)


def _chosen(
    letters: list[DeadLetter], task_ids: list[str] | None
) -> dict[tuple[str, bytes], DeadLetter]:
    """The dead letters a resend selects (as ``api.resend_dead`` selects them)."""
    wanted = None if task_ids is None else set(task_ids)
    return {
        (letter.queue, letter.key): letter
        for letter in letters
        if wanted is None or letter.task_id in wanted
    }


def _still_dead(letter: DeadLetter, before: DeadLetter) -> dict[str, Any]:
    """A selected dead letter found in the dead letters after the resend: one that never
    left (a move could not read its record), or one the broker refused again."""
    stayed = (letter.dead_at, letter.reason) == (before.dead_at, before.reason)
    return {
        "id": letter.task_id,
        "queue": letter.queue,
        "why": "not resent" if stayed else "refused again",
        "reason": letter.reason,
    }


@dead.command()
@json_option
@click.argument("task_ids", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every dead letter.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def drop(as_json: bool, task_ids: tuple[str, ...], all_: bool, yes: bool) -> None:
    """Delete dead letters for good."""
    selection = _selection(task_ids, all_)
    if not yes:
        click.confirm("Delete these dead letters for good?", abort=True)
    dropped = api.drop_dead(current_app(), selection)
    emit(as_json, {"dropped": dropped}, f"dropped {dropped}")
