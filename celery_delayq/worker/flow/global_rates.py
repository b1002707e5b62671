"""The worker's side of ``delayq_global_rate_limits``: a task's own ``rate_limit`` is then a
limit across all workers, held where its messages are released from the store
(config/limits.py), so the worker's own per-worker limiting is switched off, or a task
would be limited twice.

Celery reads ``worker_disable_rate_limits`` before it sends ``worker_init``, when the
hooks add their steps; it hands the worker's ``disable_rate_limits`` to the consumer
when the consumer step creates it. Every step's ``__init__`` runs before that, so this
step switches it off there.
"""

from __future__ import annotations

from typing import Any

from celery import bootsteps

from ...config.settings import config_of


class GlobalRateLimits(bootsteps.Step):
    """Switches off the worker's own rate limiting under ``delayq_global_rate_limits``."""

    label = "celery-delayq global rate limits"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        if config_of(worker.app).global_rate_limits:
            worker.disable_rate_limits = True
        super().__init__(worker, **kwargs)
