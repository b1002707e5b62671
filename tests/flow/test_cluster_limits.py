"""A rate limit with the schedule on a Redis Cluster, each queue in 4 shards: a bucket's
messages all wait in one shard (layout/gates.py shard_key), whatever their task ids, so
its limit holds across shards and movers: two RabbitMQ workers, whose movers claim from
every shard, start the limited task at its rate, each once."""

from __future__ import annotations

from collections import Counter

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.config.limits import limits_of
from celery_delayq.config.settings import config_of
from celery_delayq.core.layout.gates import shard_key
from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import wait_until
from celery_delayq.testing.releases import release_log

from ..brokers.amqp.test_amqp_worker import nothing_left
from ..helpers import REMEMBER, celery_process, remember, runs
from .pace import (
    assert_each_started_after_its_release,
    assert_starts_spaced,
    assert_within_rate,
    store_empty,
)

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(180)]

SHARDS = 4
RATE = "5/s"
SENT = 30


@pytest.mark.promise("flow-cluster-one-shard", "flow-rate-never-more")
def test_a_bucket_waits_in_one_shard_so_its_limit_holds_across_shards_and_movers(
    make_cluster_app, amqp_settings, cluster_store_url, rabbitmq_url, redis_server, redis_client
):
    limits = {"delayq_rate_limits": {REMEMBER: RATE}, "delayq_store_shards": SHARDS}
    app = make_cluster_app(**limits)
    queue = app.conf.task_default_queue
    settings = {**amqp_settings, "delayq_store_url": cluster_store_url, **limits}

    def worker(name: str):
        return celery_process(
            "worker",
            rabbitmq_url,
            settings,
            "-P",
            "solo",
            "-n",
            f"{name}@%h",
            record_url=redis_server.url,
        )

    with worker("one"), worker("two"), open_store(app) as store:
        sent = [remember(app, f"m{i}") for i in range(SENT)]  # all due at once
        wait_until(lambda: len(runs(redis_client)) >= SENT, timeout=60, what="every run")
        shards = store.keys.shards_of(queue)
        wait_until(lambda: store_empty(store.client, shards), what="every claim acked")
        wait_until(lambda: nothing_left(app, queue), timeout=20, what="nothing left to run")
        gate = limits_of(app, config_of(app)).gate_of({"task": REMEMBER})
        assert gate is not None
        home = store.keys.shard_of(queue, shard_key(gate))
        logs = {keys.shard: release_log(store.client, keys) for keys in shards}
        by_id = {store.keys.shard_of(queue, task_key(result.id)).shard for result in sent}

    assert len(by_id) > 1  # by task id, the messages would have spread over shards
    assert {shard for shard, log in logs.items() if log} == {home.shard}  # no other released
    releases = logs[home.shard][REMEMBER]
    recorded = runs(redis_client)
    assert Counter(run["id"] for run in recorded) == Counter(result.id for result in sent)
    assert len(releases) == SENT
    assert_within_rate(releases, RATE)
    starts = [run["at"] for run in recorded]
    jitter = assert_each_started_after_its_release(starts, releases)
    assert_starts_spaced(starts, RATE, jitter)
