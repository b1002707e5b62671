"""``celery delayq periodic export|import|clear``: the periodic entries in and out of the
store, in other schedulers' forms (celery_delayq.periodic.transfer), for a switch to
another scheduler and back."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import IO, Any

import click
from celery import Celery

from ..periodic import manage
from ..periodic.audit import acting
from ..periodic.entry import error_text
from ..periodic.transfer import beat_module, django_fixture, own_json, redbeat_keys
from ..periodic.transfer.clear_all import clear
from ..periodic.transfer.model import Export, Found
from ..periodic.transfer.plan import ADDED, CHANGED, SAME, SKIPPED, Step, transfer
from ..periodic.transfer.sources import read_file, read_module
from .periodic import unreadable_line
from .render import current_app, emit, json_option, table

#: The forms an export writes.
FORMATS = ("json", "beat_schedule", "django-celery-beat", "redbeat")
PREFIX_HELP = "redbeat's key prefix (its redbeat_key_prefix)."
#: How a dry run words each outcome.
DRY_RUN = {
    ADDED: "would be added",
    CHANGED: "would be changed",
    SAME: "same",
    SKIPPED: "would be skipped",
}


@click.command(name="export")
@click.option("--format", "form", type=click.Choice(FORMATS), default="json")
@click.option("-o", "--output", type=click.File("w"), default="-", help="Default: stdout.")
@click.option("--redbeat-prefix", default=redbeat_keys.DEFAULT_PREFIX, help=PREFIX_HELP)
def export(form: str, output: IO[str], redbeat_prefix: str) -> None:
    """Write the entries in another scheduler's form, or our own lossless JSON; those
    it cannot hold are named on stderr, with why."""
    app, now = current_app(), datetime.now(timezone.utc)
    found = manage.listing(app, now=now)
    for each in found.unreadable:
        click.echo(unreadable_line(each), err=True)
    try:
        done = _exported(form, app, found.entries, now, redbeat_prefix)
    except ImportError as exc:  # the redbeat form needs celery-redbeat
        raise click.ClickException(f"cannot write {form}: {exc}") from None
    output.write(done.text)
    for skipped in done.skipped:
        click.echo(f"skipped {skipped.name!r}: {skipped.reason}", err=True)
    for note in done.notes:
        click.echo(note, err=True)


def _exported(
    form: str, app: Celery, infos: list[manage.EntryInfo], now: datetime, prefix: str
) -> Export:
    if form == "beat_schedule":
        return beat_module.export(app, infos, now)
    if form == "django-celery-beat":
        return django_fixture.export(app, infos, now)
    if form == "redbeat":
        return redbeat_keys.export(app, infos, now, prefix)
    return own_json.export(infos, now)


@click.command(name="import")
@json_option
@click.argument("source", required=False)
@click.option("--django-settings", help="A Django settings module: django-celery-beat's rows.")
@click.option("--redbeat-url", help="The Redis redbeat keeps its entries in.")
@click.option("--redbeat-prefix", default=redbeat_keys.DEFAULT_PREFIX, help=PREFIX_HELP)
@click.option("--module", help="A module defining beat_schedule (a dotted name).")
@click.option("--dry-run", is_flag=True, help="Say what would change; write nothing.")
def import_entries(as_json: bool, dry_run: bool, **given: Any) -> None:
    """Add or change entries from SOURCE (a file: our JSON export, a django-celery-beat
    fixture, a redbeat export or a .py module; - for stdin), django-celery-beat's tables,
    redbeat's keys or a beat_schedule module. Entries not in the source are left alone;
    one the store cannot hold is skipped, with why (exit status 1)."""
    app, now = current_app(), datetime.now(timezone.utc)
    try:
        found = _read(app, now, **given)
    except click.ClickException:
        raise
    except Exception as exc:  # a missing file or package, a Redis or database down...
        raise click.ClickException(f"cannot read the source: {error_text(exc)}") from None
    with acting(action="imported"):  # each change recorded as imported
        steps = transfer(app, found, now, dry_run)
    emit(as_json, [asdict(step) for step in steps], _steps_table(steps, dry_run))
    if any(step.outcome == SKIPPED for step in steps):
        raise SystemExit(1)


def _read(
    app: Celery,
    now: datetime,
    source: str | None,
    django_settings: str | None,
    redbeat_url: str | None,
    redbeat_prefix: str,
    module: str | None,
) -> list[Found]:
    """The entries of the one source given."""
    given = {"source": source, "django": django_settings, "redbeat": redbeat_url, "module": module}
    chosen = [(kind, value) for kind, value in given.items() if value]
    if len(chosen) != 1:
        raise click.UsageError(
            "give one source: SOURCE, --django-settings, --redbeat-url or --module"
        )
    kind, value = chosen[0]
    if kind == "source":
        return read_file(app, value, now)
    if kind == "django":
        return _django_rows(app, value, now)
    if kind == "redbeat":
        return redbeat_keys.read_redis(app, value, redbeat_prefix, now)
    return read_module(app, value, now)


def _django_rows(app: Celery, settings_module: str, now: datetime) -> list[Found]:
    from ..contrib.django_beat_rows import task_rows

    return django_fixture.read(app, task_rows(settings_module), now)


def _steps_table(steps: list[Step], dry_run: bool) -> str:
    """One row per entry; then what each one does not keep."""
    if not steps:
        return "the source holds no periodic entry"
    said = DRY_RUN if dry_run else {}
    rows = [
        [step.name, said.get(step.outcome, step.outcome), ", ".join(step.fields) or step.reason]
        for step in steps
    ]
    notes = [note for step in steps for note in step.notes]
    lines = [table(["name", "outcome", "fields changed, or why skipped"], rows), *notes]
    if dry_run:
        lines.append("dry run: nothing was written")
    return "\n".join(lines)


@click.command(name="clear")
@json_option
@click.option("--yes", is_flag=True, help="Do not ask first.")
def clear_entries(as_json: bool, yes: bool) -> None:
    """Remove every entry and withdraw its runs to come, for a switch to another
    scheduler: stop every delayq beat first."""
    app = current_app()
    count = len(manage.listing(app).entries)
    if not yes:
        click.confirm(f"Remove all {count} periodic entries?", abort=True)
    with acting(action="cleared"):  # each removal recorded as cleared
        done = clear(app, datetime.now(timezone.utc))
    settle = done.settle.total_seconds()
    lines = [
        f"removed {len(done.removed)} periodic entries"
        + (
            f" and {len(done.unreadable)} records that could not be read" if done.unreadable else ""
        ),
        f"their runs due within {settle:g} s may be in a queue already, and still run; "
        "none due later does",
    ]
    if done.left:
        lines.append(
            f"written again meanwhile (a delayq beat is still running: stop it and clear "
            f"again): {', '.join(done.left)}"
        )
    data = {**vars(done), "settle": settle}
    emit(as_json, data, "\n".join(lines))
    if done.left:
        raise SystemExit(1)
