"""The Celery app of the benchmarks, for the publishing orchestrator and the workers alike.

A single task, ``bench.record``, appends one JSON record per execution to a Redis
list: the task id (to count duplicates), when it started, and how late relative to its own
``eta`` header (the lateness scenarios), or to its publish time for a task sent without
one. Recording in Redis, not in a result backend,
keeps the measurement independent of Celery's result machinery.
"""

from __future__ import annotations

import json
import os
import time
from functools import cache
from typing import Any

import redis
from celery import Celery

from celery_delayq.testing import build_app, eta_seconds

from .runconfig import RunConfig

RECORD_TASK = "bench.record"
#: ``bench.record`` under another name, for a task given flow-control limits (flow_keys.py).
RECORD_KEYED_TASK = "bench.record_keyed"
#: ``bench.record`` with acks_late (the consume scenario runs both).
RECORD_LATE_TASK = "bench.record_late"
#: An acks_late task that records its start, then runs for ``seconds``.
HOLD_TASK = "bench.hold"
#: ``bench.hold`` that ends at once when delivered again (so a rerun frees its worker).
HOLD_FIRST_TASK = "bench.hold_first"
#: The header a task sent without an ETA carries its publish time in (epoch seconds): its
#: lateness is then counted from that moment (the physical limit of a due-time publish).
PUBLISHED_HEADER = "bench_published"


@cache
def _results_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def make_app(config: RunConfig) -> Celery:
    """A Celery app for ``config``, with the recording task registered under a fixed name."""
    # A vanilla side's settings name no transport: kombu's own for the URL.
    app = build_app(f"bench-{config.side}", {"broker_transport": None, **config.celery_settings()})

    # shared=False: each app (one per run in the orchestrator) keeps its own task object.
    @app.task(name=RECORD_TASK, bind=True, shared=False)
    def record(self: Any) -> None:
        record_start(self)

    @app.task(name=RECORD_KEYED_TASK, bind=True, shared=False)
    def record_keyed(self: Any) -> None:
        record_start(self)

    @app.task(name=RECORD_LATE_TASK, bind=True, shared=False, acks_late=True)
    def record_late(self: Any) -> None:
        record_start(self)

    def record_start(self: Any) -> None:
        started = time.time()
        eta = eta_seconds(self.request.eta) or self.request.get(PUBLISHED_HEADER)
        entry = {
            "id": self.request.id,
            "late": None if eta is None else started - eta,
            "pid": os.getpid(),
            "at": started,
        }
        _results_client(config.broker_url).rpush(config.results_key, json.dumps(entry))

    @app.task(name=HOLD_TASK, bind=True, shared=False, acks_late=True)
    def hold(self: Any, seconds: float) -> None:
        entry = {"id": self.request.id, "late": None, "pid": os.getpid()}
        _results_client(config.broker_url).rpush(config.results_key, json.dumps(entry))
        time.sleep(seconds)

    @app.task(name=HOLD_FIRST_TASK, bind=True, shared=False, acks_late=True)
    def hold_first(self: Any, seconds: float) -> None:
        entry = {"id": self.request.id, "late": None, "pid": os.getpid()}
        _results_client(config.broker_url).rpush(config.results_key, json.dumps(entry))
        if not (self.request.delivery_info or {}).get("redelivered"):
            time.sleep(seconds)

    return app
