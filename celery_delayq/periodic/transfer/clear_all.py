"""Every entry removed, for a switch to another scheduler: nothing of ours runs after the
settle window.

Each entry is removed as ``periodic.remove`` removes one: its occurrences written ahead
and due after the settle window are withdrawn, and a tombstone mark keeps a beat that
still holds it from writing it again. Those due within the settle window may be in a
queue already, and run. A beat started afterwards syncs its ``beat_schedule`` again: the
beats are stopped first, and their ``beat_scheduler`` set to the other scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import Celery

from .. import manage
from ..writer import OccurrenceWriter


@dataclass(frozen=True)
class Cleared:
    """What ``clear`` removed, what was there again after it (a beat still running
    wrote it), and the settle window after which nothing of the removed runs."""

    removed: list[str]
    unreadable: list[str]  # records that could not be read, removed too
    left: list[str]
    settle: timedelta


def clear(app: Celery, now: datetime) -> Cleared:
    """Remove every entry, and every stored record that cannot be read."""
    found = manage.listing(app, now=now)
    removed = [info.entry.name for info in found.entries]
    for name in removed:
        manage.remove(app, name, now=now)
    unreadable = [each.name for each in found.unreadable]
    for name in unreadable:
        manage.remove(app, name, now=now)
    after = manage.listing(app, now=now)
    left = sorted([info.entry.name for info in after.entries] + [e.name for e in after.unreadable])
    return Cleared(removed, unreadable, left, OccurrenceWriter(app).settle)
