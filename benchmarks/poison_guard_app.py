"""The worker app of ``benchmarks.poison_guard``: ``celery -A benchmarks.poison_guard_app
worker``, configured by the environment the benchmark sets.

``BROKER_URL`` and ``QUEUE``; ``MESSAGES``, how many tasks it times: the start of the
first and the end of the last are written to Redis (``bench:guard:<queue>``) once the
last ends, so nothing is written per task. ``POISON_GUARD=off`` is the baseline: the
guard's consumer step is added as always, but wraps nothing.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import signals

from celery_delayq.testing import build_app

URL, QUEUE, MESSAGES = os.environ["BROKER_URL"], os.environ["QUEUE"], int(os.environ["MESSAGES"])
RESULT_KEY = f"bench:guard:{QUEUE}"

app = build_app("bench_guard", {"broker_url": URL, "task_default_queue": QUEUE}, current=True)

if os.environ.get("POISON_GUARD") == "off":
    from celery_delayq.worker import poison

    poison.guard_task_handler = lambda consumer, max_deliveries: None  # the step wraps nothing


@app.task(name="bench.small", ignore_result=True)
def small(n: int) -> int:
    """A small task: what is measured is the worker's taking and dispatching of it."""
    return n + 1


_seen: dict[str, float] = {}


@signals.task_prerun.connect(weak=False)
def _first_start(**_: Any) -> None:
    _seen.setdefault("first", time.perf_counter())


@signals.task_postrun.connect(weak=False)
def _last_end(**_: Any) -> None:
    _seen["count"] = _seen.get("count", 0) + 1
    if _seen["count"] == MESSAGES:
        seconds = time.perf_counter() - _seen["first"]
        redis.Redis.from_url(URL).set(RESULT_KEY, repr(seconds))


@signals.worker_ready.connect(weak=False)
def _guarded(sender: Any, **_: Any) -> None:
    """Say whether the consumer's task handler is the guard's (checked by the benchmark)."""
    guarded = getattr(sender.create_task_handler, "guarded", False)
    redis.Redis.from_url(URL).set(f"{RESULT_KEY}:guarded", int(guarded))
