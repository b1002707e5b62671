"""End to end with the schedule on a Redis Cluster: real ``celery worker`` processes on
RabbitMQ and on a Redis broker, each queue spread over shards on 3 masters; every
delayed task and retry runs once, never before its ETA."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import celery_process, remember, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

SHARDS = 4
#: From 1 s: a countdown shorter than the first publish (it opens the broker and store
#: connections) is already due when sent, and goes to the broker without the store.
COUNTDOWNS = [1.0 + 0.1 * i for i in range(20)]


def assert_each_ran_once_not_before_its_eta(sent, recorded) -> None:
    executions = Counter(run["id"] for run in recorded)
    assert executions == Counter(result.id for result in sent)
    for run in recorded:
        if run["eta"] is not None:
            assert run["at"] >= datetime.fromisoformat(run["eta"]).timestamp(), run["label"]


def test_a_rabbitmq_worker_runs_tasks_and_retries_once_from_a_sharded_cluster_schedule(
    make_cluster_app, amqp_settings, cluster_store_url, rabbitmq_url, redis_server, redis_client
):
    settings = {
        **amqp_settings,
        "delayq_store_url": cluster_store_url,
        "delayq_store_shards": SHARDS,
    }
    app = make_cluster_app(delayq_store_shards=SHARDS)
    queue = app.conf.task_default_queue
    worker = celery_process(
        "worker", rabbitmq_url, settings, "-P", "solo", record_url=redis_server.url
    )
    with worker:
        sent = [remember(app, f"c{c:.1f}", countdown=c) for c in COUNTDOWNS]
        retried = app.send_task("tests.worker_app.retry_once", (1,))
        wait_until(lambda: len(runs(redis_client)) >= len(sent) + 2, timeout=30)
        wait_until(
            lambda: not any(b.pending or b.in_flight for b in open_backlog(app)),
            timeout=20,
            what="nothing left in the schedule",
        )

    recorded = [run for run in runs(redis_client) if run["id"] != retried.id]
    assert_each_ran_once_not_before_its_eta(sent, recorded)
    assert [r["retries"] for r in runs(redis_client) if r["id"] == retried.id] == [0, 1]
    with open_store(app) as store:
        stats = store.stats(queue)
    assert (stats["scheduled"], stats["moved"]) == (21, 21)


def test_a_redis_broker_worker_runs_tasks_once_from_a_sharded_cluster_schedule(
    make_app, cluster_store_url, redis_server, redis_client
):
    settings = {"delayq_store_url": cluster_store_url, "delayq_store_shards": SHARDS}
    app = make_app(**settings)
    with celery_process("worker", redis_server.url, settings, "-P", "solo"):
        sent = [remember(app, f"c{c:.1f}", countdown=c) for c in COUNTDOWNS]
        wait_until(lambda: len(runs(redis_client)) >= len(sent), timeout=30)
        wait_until(
            lambda: not any(b.pending or b.in_flight for b in open_backlog(app)),
            timeout=20,
            what="nothing left in the schedule",
        )

    assert_each_ran_once_not_before_its_eta(sent, runs(redis_client))
    assert not redis_client.keys("delayq*")  # the schedule was on the cluster only


def open_backlog(app):
    with open_store(app) as store:
        return store.backlog()
