"""A flow-controlled task with a real worker: its retry is a new release, through the
same gate (its limit key kept: Celery copies a request's custom headers on retry)."""

from __future__ import annotations

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

TASK = "tests.worker_app.retry_once"


def test_a_retry_goes_through_its_gate_again_under_its_limit_key(
    make_app, redis_server, redis_client
):

    settings = {"delayq_rate_limits": {TASK: "10/s"}, "delayq_release_log": 100}
    app = make_app(**settings)
    with celery_process("worker", redis_server.url, settings, "-P", "solo"):
        result = app.send_task(TASK, (0.2,), headers={"delayq_limit_key": "cust-42"})
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=15)

    first, second = runs(redis_client)
    assert [first["retries"], second["retries"]] == [0, 1]
    assert first["id"] == second["id"] == result.id
    with open_store(app) as store:
        keys = store.keys.for_queue("default")
        stats = store.stats("default")
    log = redis_client.lrange(f"{keys.gates}log", 0, -1)
    buckets = [entry.partition(b" ")[2] for entry in log]
    assert buckets == [f"{TASK}\x00cust-42".encode()] * 2
    assert (stats["gated"], stats["released"]) == (2, 2)
