"""The runs workers record, copied back onto django-celery-beat's rows, for the admin to
show: ``last_run_at`` (when a worker last started the entry's task) and
``total_run_count`` (the runs workers started since the entry came into the store).

The two columns are written with an ``UPDATE`` of them alone, as ``DatabaseScheduler``
saves them with ``no_changes``: no signal runs, so ``PeriodicTasks.last_update`` stays as it
is (no beat syncs again for it) and ``date_changed`` too. Only rows whose values differ
from the store's are written, at most ``MOST_COPIED`` a pass (the rest on the next ones);
every beat writes the same values, so any number of beats may copy.
"""

from __future__ import annotations

from datetime import datetime, timezone

from django.conf import settings
from django.utils.timezone import make_aware, make_naive
from django_celery_beat.models import PeriodicTask

from ...core.store import DelayedStore
from ...periodic.history import EntryHistory

__all__ = ["MOST_COPIED", "copy_runs"]

#: The most rows one pass writes.
MOST_COPIED = 100


def copy_runs(store: DelayedStore, rows: list[PeriodicTask]) -> int:
    """Copy the store's last run and run count onto each of ``rows`` that shows others
    (the rows are updated in place, as written); how many were written."""
    history = EntryHistory(store.client, store.keys).read(row.name for row in rows)
    copied = 0
    for row in rows:
        found = history[row.name]
        started, count = found.last_started, found.total_run_count
        if started is None or (_aware(row.last_run_at), row.total_run_count) == (started, count):
            continue
        if copied == MOST_COPIED:
            break
        shown = started if settings.USE_TZ else make_naive(started)
        # a row disabled meanwhile keeps no last run (django-celery-beat clears it)
        PeriodicTask.objects.filter(pk=row.pk, enabled=True).update(
            last_run_at=shown, total_run_count=count
        )
        row.last_run_at, row.total_run_count = started, count
        copied += 1
    return copied


def _aware(moment: datetime | None) -> datetime | None:
    """A time read from a row, aware (naive ones are in Django's zone, without USE_TZ)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return make_aware(moment).astimezone(timezone.utc)
