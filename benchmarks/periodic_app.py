"""The Celery app the beats and the worker of ``python -m benchmarks.periodic_beats`` load
(``celery -A benchmarks.periodic_app``), one scheduler's side each.

Configured by one JSON environment variable (``PERIODIC_BENCH``): the side's broker and its
scheduler (``persistent``, ``redbeat`` or ``delayq``; only ``delayq`` runs on celery-delayq's
transport). Two entries, both calling ``periodic.run`` with the entry's name: a 1-second
interval and a per-minute ``crontab()`` (``benchmarks.periodic_cost``: many intervals).
Each run appends one JSON record to the side's Redis (``RUNS_KEY``): the entry, the
occurrence it stands for (celery-delayq's header), when its message was sent (a header a
``before_task_publish`` handler stamps in the beat that sends it), and when it started.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

import redis
from celery import signals
from celery.schedules import crontab

from celery_delayq.periodic.records import OCCURRENCE_HEADER
from celery_delayq.testing import build_app

from .beat_chaos import READY_KEY, RUNS_KEY, SENT_HEADER, stamp_sent

ENV = "PERIODIC_BENCH"
TASK = "periodic.run"
QUEUE = "periodic"
#: Each entry's name and its interval in seconds (the crontab's: a minute).
ENTRIES = {"every-second": 1.0, "every-minute": 60.0}
#: Where a process started without the orchestrator's settings would connect: nowhere.
NOWHERE = {"scheduler": "delayq", "broker_url": "redis://127.0.0.1:9/0"}


def beat_schedule(entries: int = 0, every: float = 60.0) -> dict[str, dict[str, Any]]:
    """The two entries; or, for the cost benchmark, ``entries`` intervals of ``every``."""
    if entries:
        names = (f"e{n:05}" for n in range(entries))
        return {name: {"task": TASK, "schedule": every, "args": (name,)} for name in names}
    return {
        "every-second": {"task": TASK, "schedule": 1.0, "args": ("every-second",)},
        "every-minute": {"task": TASK, "schedule": crontab(), "args": ("every-minute",)},
    }


def settings(
    scheduler: str, broker_url: str, entries: int = 0, every: float = 60.0
) -> dict[str, Any]:
    """The side's Celery settings: on kombu's own transport unless it is celery-delayq's."""
    return {
        **({} if scheduler == "delayq" else {"broker_transport": None}),
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": QUEUE,
        "task_ignore_result": True,
        "enable_utc": True,
        "timezone": "UTC",
        "beat_schedule": beat_schedule(entries, every),
    }


config = json.loads(os.environ.get(ENV) or json.dumps(NOWHERE))
app = build_app(f"periodic-{config['scheduler']}", settings(**config), current=True)


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(config["broker_url"])


def run(self: Any, entry: str) -> None:
    started = time.time()
    record = {
        "entry": entry,
        "at": started,
        "occurrence": self.request.get(OCCURRENCE_HEADER),
        "sent": self.request.get(SENT_HEADER),
    }
    _client().rpush(RUNS_KEY, json.dumps(record))


def _announce_ready(**_: Any) -> None:
    _client().sadd(READY_KEY, os.getpid())


app.task(name=TASK, bind=True)(run)
signals.before_task_publish.connect(stamp_sent, weak=False)
signals.worker_ready.connect(_announce_ready, weak=False)
# A beat's scheduler is set up (its entries loaded) before beat_init is sent.
signals.beat_init.connect(_announce_ready, weak=False)
