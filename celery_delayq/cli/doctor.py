"""``celery delayq doctor``: check the store's Redis and the store, and say what to fix."""

from __future__ import annotations

import dataclasses

import click

from ..core.health.health_checks import FAIL, OK, WARN, Finding
from ..ops.health import doctor as run_doctor
from .render import current_app, emit, json_option

MARKS = {OK: "ok  ", WARN: "WARN", FAIL: "FAIL"}


def finding_line(finding: Finding) -> str:
    line = f"[{MARKS[finding.level]}] {finding.check}: {finding.message}"
    return line + (f"\n       fix: {finding.fix}" if finding.fix else "")


@click.command()
@json_option
@click.option("--repair", is_flag=True, help="Fix store inconsistencies that are safe to fix.")
@click.option(
    "--persistence-confirmed",
    is_flag=True,
    help="Persistence is confirmed another way (a managed Redis that refuses CONFIG): pass "
    "the persistence check when AOF is off and the save setting cannot be read.",
)
def doctor(as_json: bool, repair: bool, persistence_confirmed: bool) -> None:
    """Check the store's Redis and the store itself, and say what to fix. Exits 1 on a
    failed check, and on one that cannot be made (a Redis user that may not read what
    it needs)."""
    report = run_doctor(current_app(), repair=repair, persistence_confirmed=persistence_confirmed)
    data = {
        "redis": report.redis,
        "findings": [dataclasses.asdict(f) for f in report.findings],
        "ok": report.ok,
    }
    human = [f"store: {report.redis}", *(finding_line(f) for f in report.findings)]
    emit(as_json, data, "\n".join(human))
    if not report.ok:
        raise SystemExit(1)
