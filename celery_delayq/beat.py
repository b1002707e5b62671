"""``beat_scheduler = "celery_delayq.beat:Scheduler"``: the scheduler lives in
``celery_delayq.celery.beat``; this path stays for settings."""

from __future__ import annotations

from .celery.beat import Scheduler

__all__ = ["Scheduler"]
