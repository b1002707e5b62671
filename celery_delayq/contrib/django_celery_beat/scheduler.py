"""celery-delayq's beat scheduler with django-celery-beat's ``PeriodicTask`` rows, edited
in the Django admin, as its entries.

Each pass does what ``celery_delayq.beat:Scheduler`` does (``CELERY_BEAT_SCHEDULE``
synced at the start, every entry's occurrences written ahead once across beats, a mover),
then syncs the rows into the store when they changed (sync.py) and copies the runs
workers recorded back onto them (runs.py). The Django database may be out of reach for a
while: the store's entries go on being written ahead, and the rows are synced again once
it is back.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import close_old_connections

from ...beat import Scheduler as DelayqScheduler
from ...periodic.sending import store_of
from .runs import copy_runs
from .sync import AdminSync

__all__ = ["Scheduler"]

logger = logging.getLogger(__name__)


class Scheduler(DelayqScheduler):
    """celery-delayq's scheduler, with django-celery-beat's rows synced into the store."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(app, *args, **kwargs)
        self.admin = AdminSync(self.app, self.writer)

    def _pass(self, now: datetime) -> None:
        super()._pass(now)
        try:
            self._admin_pass(now)
        except Exception:  # the database or Redis out of reach: the next pass tries again
            logger.exception("django-celery-beat rows: this pass failed; retrying next pass")

    def _admin_pass(self, now: datetime) -> None:
        close_old_connections()  # as DatabaseScheduler: a long-lived beat's may have gone
        with self.app.producer_or_acquire() as producer:
            store = store_of(producer)
            if self.admin.due():
                synced = self.admin.apply(store, producer, now)
                if synced is not None and (synced.written or synced.removed or synced.refused):
                    logger.info(
                        "django-celery-beat rows: %d written, %d removed, %d refused",
                        len(synced.written),
                        len(synced.removed),
                        len(synced.refused),
                    )
            copy_runs(store, self.admin.rows)

    @property
    def info(self) -> str:
        return f"{super().info}\n    . django-celery-beat rows -> synced into the store"
