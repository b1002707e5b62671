"""A tiny Celery app for the wheel smoke test (.ci/smoke_wheel.sh): celery-delayq's
transport on the Redis at $SMOKE_BROKER_URL, and one task that records each run."""

from __future__ import annotations

import json
import os
import time

import redis
from celery import Celery

BROKER_URL = os.environ.get("SMOKE_BROKER_URL", "redis://127.0.0.1:6379/0")
RUNS_KEY = "smoke:runs"

app = Celery("tinyapp", broker=BROKER_URL)
app.conf.broker_transport = "celery_delayq.transport:Transport"
app.conf.broker_connection_retry_on_startup = False


@app.task  # type: ignore[untyped-decorator]  # celery has no type hints
def record(token: str) -> None:
    """Append this run (its token and the time it started) to a Redis list."""
    started = time.time()
    redis.Redis.from_url(BROKER_URL).rpush(RUNS_KEY, json.dumps([token, started]))
