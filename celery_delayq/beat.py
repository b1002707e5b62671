"""A Celery beat scheduler that also runs the mover.

``beat_scheduler = "celery_delayq.beat:Scheduler"`` (or ``celery beat -S delayq``)
runs the ordinary ``beat_schedule`` exactly as Celery's default
``PersistentScheduler`` does, and moves due delayed messages in a thread beside it.
"""

from __future__ import annotations

from typing import Any

from celery.beat import PersistentScheduler

from .brokers.common.diverter import check_store_setting
from .brokers.common.settings import config_of
from .brokers.connect import log_startup, mover_thread
from .core.mover import MoverThread
from .worker.metrics import start_configured_exporter


class Scheduler(PersistentScheduler):
    """PersistentScheduler plus a mover thread started on the first tick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.mover_thread: MoverThread | None = None
        self.exporter: Any = None
        super().__init__(*args, **kwargs)
        # Validate now, so a bad setting fails at start; `celery beat` also builds a
        # lazy instance only to print its banner, so no work starts here.
        self.delayq_config = config_of(self.app)
        check_store_setting(self.app)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if self.mover_thread is None:
            log_startup(self.app, "beat moves due messages")
            self.mover_thread = mover_thread(self.app, "beat mover")
            self.mover_thread.start()
            self.exporter = start_configured_exporter(self.app)
        interval: float = super().tick(*args, **kwargs)
        return interval

    def close(self) -> None:
        if self.mover_thread is not None:
            self.mover_thread.stop()
        if self.exporter is not None:
            self.exporter.shutdown()
        super().close()

    @property
    def info(self) -> str:
        prefix = self.delayq_config.key_prefix
        return f"{super().info}\n    . delayq mover -> on (key prefix {prefix!r})"
