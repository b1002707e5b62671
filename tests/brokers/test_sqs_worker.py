"""A real ``celery worker`` on SQS (moto's server, an emulator of AWS SQS): delayed
tasks wait in Redis and run once each, never before their ETA."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import celery_process, remember, remember_delayed, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


def test_delayed_tasks_on_sqs_run_once_each_never_early(
    make_sqs_app, sqs_server, redis_server, redis_client
):
    app = make_sqs_app()
    settings = {
        key: app.conf[key]
        for key in (
            "broker_transport",
            "broker_transport_options",
            "delayq_store_url",
            "task_default_queue",
        )
    }
    settings["broker_transport_options"] = {
        **settings["broker_transport_options"],
        "polling_interval": 0.1,
        "wait_time_seconds": 0,
    }
    with celery_process("worker", sqs_server, settings, "-P", "solo", record_url=redis_server.url):
        sent, kept = remember_delayed(app, 0.5, 1.0, 2.0)
        sent.append(remember(app, "now"))
        wait_until(lambda: len(runs(redis_client)) >= len(sent), timeout=30)

    assert Counter(r["id"] for r in runs(redis_client)) == Counter(s.id for s in sent)
    for run in runs(redis_client):
        if run["eta"]:
            assert run["at"] >= datetime.fromisoformat(run["eta"]).timestamp(), run["label"]
    with open_store(app) as store:
        stats = store.stats(app.conf.task_default_queue)
    assert kept <= stats["scheduled"] == stats["moved"] <= 3
