"""The module ``celery -A benchmarks.worker_app worker`` loads in worker subprocesses.

It builds the app from the environment the orchestrator sets, and announces
readiness in Redis (``worker_ready``), which is cheaper and more reliable than
parsing the worker's log or pinging it over the broker.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import signals

from .app import make_app
from .runconfig import RunConfig

config = RunConfig.from_env()
app = make_app(config)


@signals.worker_ready.connect(weak=False)
def _announce_ready(**_: Any) -> None:
    redis.Redis.from_url(config.broker_url).sadd(config.ready_key, os.getpid())
