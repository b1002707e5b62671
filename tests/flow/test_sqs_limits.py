"""A rate limit on SQS (moto's server): the claim releases a limited task's messages
from their bucket (lua/claim_due.lua), and a real worker starts them at the limit's
pace, each once."""

from __future__ import annotations

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import REMEMBER, celery_process, remember, runs
from .pace import (
    assert_released_at_the_rate_each_once,
    store_empty,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

RATE = "5/s"
SENT = 12


@pytest.mark.promise("flow-handover-brokers", "flow-rate-never-more")
def test_an_sqs_worker_starts_a_limited_task_at_its_rate_each_once(
    make_sqs_app, sqs_server, redis_server, redis_client
):
    limits = {"delayq_rate_limits": {REMEMBER: RATE}}
    app = make_sqs_app(**limits)
    queue = app.conf.task_default_queue
    names = ("broker_transport", "broker_transport_options", "delayq_store_url")
    settings = {name: app.conf[name] for name in names}
    settings["broker_transport_options"] = {
        **settings["broker_transport_options"],
        "polling_interval": 0.1,
        "wait_time_seconds": 0,
    }
    settings = {**settings, **limits, "task_default_queue": queue}
    worker = celery_process(
        "worker", sqs_server, settings, "-P", "solo", record_url=redis_server.url
    )
    with worker, open_store(app) as store:
        sent = [remember(app, f"m{i}") for i in range(SENT)]  # all due at once
        wait_until(lambda: len(runs(redis_client)) >= SENT, timeout=60, what="every run")
        shards = store.keys.shards_of(queue)
        wait_until(lambda: store_empty(redis_client, shards), what="every claim acked")
        stats = store.stats(queue)

    sent_ids = [result.id for result in sent]
    assert_released_at_the_rate_each_once(redis_client, REMEMBER, sent_ids, shards[0], stats, RATE)
