"""``celery -A proj delayq ...``: see, act on and run the delayed store from a shell.

Registered through the ``celery.commands`` entry point; the Celery app comes from
Celery's own CLI context (``-A``), so every command reads the app's settings. Each
command prints a table by default and JSON with ``--json``. This package is the only
part of celery-delayq that imports click.
"""

from __future__ import annotations

import click

from .dead import dead
from .doctor import doctor
from .flow_limits import limits
from .periodic import periodic
from .periodic_transfer import clear_entries, export, import_entries
from .rescue import rescue_command
from .run import exporter, mover
from .status import status
from .tasks import cancel, list_, promote, purge, reschedule, show
from .web import web


@click.group(name="delayq")
def delayq() -> None:
    """Inspect and operate celery-delayq's delayed tasks in Redis."""


for command in (
    status,
    list_,
    show,
    cancel,
    reschedule,
    promote,
    purge,
    mover,
    doctor,
    dead,
    limits,
):
    delayq.add_command(command)
delayq.add_command(rescue_command, name="rescue")
delayq.add_command(exporter)
delayq.add_command(web)
delayq.add_command(periodic)
for command in (export, import_entries, clear_entries):
    periodic.add_command(command)

__all__ = ["delayq"]
