"""Limits on a broker elsewhere (RabbitMQ): the schedule's claim releases a limited
task's messages from their bucket (lua/claim_due.lua), and a real worker starts them at
the limit's pace, each once; a concurrency limit's slots are held and given back by the
worker as on Redis."""

from __future__ import annotations

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..brokers.amqp.test_amqp_worker import nothing_left
from ..helpers import REMEMBER, celery_process, remember, runs
from .pace import (
    assert_released_at_the_rate_each_once,
    store_empty,
)
from .test_concurrency import STAMPED, ended, held_slots, most_at_once, runs_of

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(120)]

RATE = "5/s"
SENT = 30


@pytest.mark.promise("flow-handover-brokers", "flow-rate-never-more")
def test_a_rabbitmq_worker_starts_a_limited_task_at_its_rate_each_once(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, redis_client
):
    limits = {"delayq_rate_limits": {REMEMBER: RATE}}
    app = make_amqp_app(**limits)
    queue = app.conf.task_default_queue
    worker = celery_process(
        "worker",
        rabbitmq_url,
        {**amqp_settings, **limits},
        "-P",
        "solo",
        record_url=redis_server.url,
    )
    with worker, open_store(app) as store:
        sent = [remember(app, f"m{i}") for i in range(SENT)]  # all due at once
        wait_until(lambda: len(runs(redis_client)) >= SENT, timeout=60, what="every run")
        shards = store.keys.shards_of(queue)
        wait_until(lambda: store_empty(redis_client, shards), what="every claim acked")
        wait_until(lambda: nothing_left(app, queue), timeout=20, what="nothing left to run")
        stats = store.stats(queue)

    sent_ids = [result.id for result in sent]
    assert_released_at_the_rate_each_once(redis_client, REMEMBER, sent_ids, shards[0], stats, RATE)


@pytest.mark.promise("concurrency-at-most-n", "concurrency-slot-back-at-end")
def test_a_concurrency_limit_holds_on_rabbitmq_and_each_slot_comes_back_at_the_end(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, redis_client
):
    """Limit 1 on RabbitMQ, four tasks of half a second, a worker of three processes:
    one at a time, each once, and no slot left (each given back as its task ended, long
    before the lease)."""
    limits = {"delayq_concurrency_limits": {STAMPED: 1}, "delayq_mover_max_sleep": 60.0}
    app = make_amqp_app(**limits)
    worker = celery_process(
        "worker",
        rabbitmq_url,
        {**amqp_settings, **limits},
        "-c",
        "3",
        record_url=redis_server.url,
    )
    with worker:
        ids = [app.send_task(STAMPED, (0.5,), {"label": str(n)}).id for n in range(4)]
        wait_until(lambda: ended(redis_client) == 4, timeout=60, what="four tasks done")
    done = runs_of(redis_client)
    assert sorted(run["id"] for run in done) == sorted(ids)
    assert most_at_once(done) == 1
    assert held_slots(redis_client, app) == {}
