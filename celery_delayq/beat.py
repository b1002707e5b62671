"""celery beat with its periodic entries in the delayed store, run by any number of beats.

``beat_scheduler = "celery_delayq.beat:Scheduler"`` (or ``celery beat -S delayq``):

- at start, ``beat_schedule`` is synced into the store (periodic/manage.py's
  ``sync_settings``); entries made at run time (API, CLI, dashboard) are kept;
- every pass, each entry's occurrences are written ahead as delayed messages, up to
  ``delayq_periodic_horizon`` ahead, under the entry's mark (periodic/writer.py): of any number of
  beats, one writes each occurrence, and no lock or leader is needed; an entry that
  fails (or cannot be read) is logged and stops no other;
- a mover thread delivers due messages, as the workers' movers do, so the occurrences
  reach the queues while the beat runs even with no worker mover.

A beat writes nothing of its own to disk: the schedule file option is accepted and
ignored.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from typing import Any

from celery.beat import Scheduler as CeleryScheduler
from celery.schedules import crontab

from .brokers.common.diverter import check_store_setting
from .brokers.connect import log_startup, mover_thread
from .config.settings import config_of
from .core.moving.mover import MoverThread
from .metrics import start_configured_exporter
from .periodic.describe import BACKEND_CLEANUP
from .periodic.manage import settings_entry, sync_settings
from .periodic.registry import EntryRegistry, Read, Stored
from .periodic.sending import store_of
from .periodic.writer import OccurrenceWriter

logger = logging.getLogger(__name__)

#: Most seconds between two write-ahead passes (at most a quarter of the horizon), so a
#: beat that passes late still writes each occurrence long before it is due.
PASS_INTERVAL = 5.0


class Scheduler(CeleryScheduler):
    """Periodic entries in the store, written ahead once across beats; and a mover."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("schedule_filename", None)  # nothing is kept on disk
        self.mover_thread: MoverThread | None = None
        self.exporter: Any = None
        self.synced = False
        #: The entries read last pass, by their stored bytes (periodic/registry.py reuses them).
        self.parsed: dict[Stored, Read] = {}
        super().__init__(app, *args, **kwargs)
        # Validate now, so a bad setting or entry fails at start; `celery beat` also
        # builds a lazy instance only to print its banner, so no work starts here.
        self.delayq_config = config_of(self.app)
        check_store_setting(self.app)
        self.settings_schedule = self._settings_schedule()
        now = datetime.now(timezone.utc)
        for name, spec in self.settings_schedule.items():
            settings_entry(self.app, name, spec, now)
        self.writer = OccurrenceWriter(self.app)
        self.pass_interval = min(PASS_INTERVAL, self.writer.horizon.total_seconds() / 4)

    def setup_schedule(self) -> None:
        """Nothing to load: the entries are in the store (synced on the first pass)."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self.mover_thread is None:
            log_startup(self.app, "beat moves due messages")
            self.mover_thread = mover_thread(self.app, "beat mover")
            self.mover_thread.start()
            self.exporter = start_configured_exporter(self.app)
        try:
            self._pass(datetime.now(timezone.utc))
        except Exception:  # Redis down, say: the next pass tries again
            logger.exception(
                "periodic entries: this pass failed; retrying in %ss", self.pass_interval
            )
        return min(self.pass_interval, float(self.max_interval))

    def _pass(self, now: datetime) -> None:
        """Sync the settings' entries (once), then write every entry's occurrences ahead."""
        if not self.synced:
            synced = sync_settings(self.app, self.settings_schedule, now)
            logger.info(
                "periodic entries from beat_schedule: %d written, %d removed, %d refused",
                len(synced.written),
                len(synced.removed),
                len(synced.refused),
            )
            self.synced = True
        with self.app.producer_or_acquire() as producer:  # the pass's one store handle
            store = store_of(producer)
            read_at = time.monotonic()
            entries = EntryRegistry(store.client, store.keys).all(self.parsed)
            self.writer.advance_all(entries, now, producer, read_at)

    def _settings_schedule(self) -> dict[str, Any]:
        """``beat_schedule``, with Celery's own default entry when it would add one."""
        schedule = dict(self.app.conf.beat_schedule or {})
        conf = self.app.conf
        if (
            conf.result_expires
            and BACKEND_CLEANUP not in schedule
            and not self.app.backend.supports_autoexpire
        ):
            schedule[BACKEND_CLEANUP] = {
                "task": BACKEND_CLEANUP,
                "schedule": crontab("0", "4", "*"),
                "options": {"expires": 12 * 3600},
            }
        return schedule

    def sync(self) -> None:
        """Nothing to save: every change is in the store when made."""

    def close(self) -> None:
        if self.mover_thread is not None:
            self.mover_thread.stop()
        if self.exporter is not None:
            self.exporter.shutdown()
        super().close()

    @property
    def info(self) -> str:
        prefix = self.delayq_config.key_prefix
        return (
            f"    . periodic entries -> in the delayed store (key prefix {prefix!r}), "
            f"written {self.writer.horizon} ahead\n"
            f"    . delayq mover -> on"
        )
