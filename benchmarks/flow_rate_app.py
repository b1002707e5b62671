"""The Celery app the workers and standalone movers of ``python -m benchmarks.flow_rate``
load (``celery -A benchmarks.flow_rate_app``), one side at a time.

Configured by one JSON environment variable (``FLOW_BENCH``): the side (``delayq`` or
``celery``), its broker and the rate. On ``delayq`` one task, ``flow.record``, is limited by
``delayq_rate_limits`` across all workers, its releases logged in the store
(``delayq_release_log``), and no worker moves (``delayq_worker_mover = False``: the
standalone movers do); on ``celery`` the same task has Celery's own ``rate_limit`` on
kombu's own Redis transport. Each run appends ``"<epoch s> <task id>"`` to ``STARTS_KEY``.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

import redis
from celery import Celery, signals

from celery_delayq.testing import build_app

ENV = "FLOW_BENCH"
TASK = "flow.record"
QUEUE = "flow"
#: The Redis list of the runs' starts, and the set of ready workers' pids.
STARTS_KEY = "flow:starts"
READY_KEY = "flow:ready"
#: Releases the store's log keeps: more than any run sends, so none is trimmed away.
RELEASE_LOG = 100_000
#: Where a process started without the orchestrator's settings would connect: nowhere.
NOWHERE = {"side": "delayq", "broker_url": "redis://127.0.0.1:9/0", "rate": "10/s"}


def settings(side: str, broker_url: str, rate: str) -> dict[str, Any]:
    """The side's Celery settings; only ``delayq`` runs on celery-delayq's transport."""
    common = {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "task_default_queue": QUEUE,
        "task_ignore_result": True,
    }
    if side != "delayq":
        return {**common, "broker_transport": None}
    return {
        **common,
        "delayq_rate_limits": {TASK: rate},
        "delayq_worker_mover": False,
        "delayq_release_log": RELEASE_LOG,
    }


def make_app(side: str, broker_url: str, rate: str) -> Celery:
    """The side's app with ``flow.record`` (Celery's ``rate_limit`` on ``celery`` only)."""
    app = build_app(f"flow-{side}", settings(side, broker_url, rate), current=True)
    own_limit = None if side == "delayq" else rate
    app.task(name=TASK, bind=True, rate_limit=own_limit)(record)
    return app


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(config["broker_url"])


def record(self: Any) -> None:
    _client().rpush(STARTS_KEY, f"{time.time():.6f} {self.request.id}")


def _announce_ready(**_: Any) -> None:
    _client().sadd(READY_KEY, os.getpid())


config = json.loads(os.environ.get(ENV) or json.dumps(NOWHERE))
app = make_app(**config)
signals.worker_ready.connect(_announce_ready, weak=False)
