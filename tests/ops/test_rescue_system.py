"""Rescue with real workers: the unacked entries of a killed vanilla worker are rescued,
and rescued tasks then run exactly once, after their ETA, in a celery-delayq worker."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone

import pytest

from celery_delayq.brokers.common.message import due_ms, eta_timestamp
from celery_delayq.ops.rescue import rescue
from celery_delayq.testing import wait_until, wait_until_quiescent

from ..helpers import celery_process, remember, runs
from ..vanilla import PRIORITY_LIST, apps, in_store, past

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


def test_unacked_entries_of_a_killed_worker_are_rescued(make_app, redis_server, redis_client):
    prefix = "pfx:"
    vanilla, app = apps(make_app, prefix)
    settings = {
        "broker_transport": "redis",
        "broker_transport_options": {"global_keyprefix": prefix},
    }
    with celery_process("worker", redis_server.url, settings, "-P", "solo") as worker:
        sent = [remember(vanilla, f"held{i}", countdown=30, priority=5 * (i % 2)) for i in range(3)]
        wait_until(lambda: redis_client.hlen(prefix + "unacked") == 3)
        worker.kill()
        worker.wait()
    entries = redis_client.hgetall(prefix + "unacked")

    report = rescue(app)

    assert (report.rescued_from_unacked, report.rescued_from_lists, report.errors) == (3, 0, 0)
    assert redis_client.hlen(prefix + "unacked") == 0
    assert redis_client.zcard(prefix + "unacked_index") == 0
    moved = in_store(app)
    assert set(moved) == {s.id for s in sent}
    for raw in entries.values():
        message = json.loads(raw)[0]
        queue, destination, due, payload = moved[message["headers"]["id"]]
        kombu_list = PRIORITY_LIST if message["properties"]["priority"] else "default"
        assert (queue, destination) == ("default", prefix + kombu_list)
        assert due == due_ms(eta_timestamp(message["headers"]["eta"], timezone.utc))
        stored = json.loads(payload)
        assert stored["headers"]["redelivered"] is True  # as kombu's restore marks it
        assert stored["body"] == message["body"]


@pytest.mark.slow
def test_rescued_tasks_run_exactly_once_after_their_eta(make_app, redis_server, redis_client):
    vanilla, app = apps(make_app)
    vanilla_worker = ("worker", redis_server.url, {"broker_transport": "redis"}, "-P", "solo")
    with celery_process(*vanilla_worker) as worker:
        held = [remember(vanilla, f"held{i}", countdown=8) for i in range(2)]
        wait_until(lambda: redis_client.hlen("unacked") == 2)
        worker.kill()
        worker.wait()
    # Until Redis has seen the dead worker's connection close, its BRPOP is still waiting
    # there, and Redis would hand it the next message published (kombu's own loss window)
    wait_until(lambda: redis_client.info("clients")["blocked_clients"] == 0)
    queued = [
        remember(vanilla, "queued", countdown=8),  # still ahead when the rescue runs
        remember(vanilla, "urgent", countdown=8, priority=5),
    ]
    others = [remember(vanilla, "now"), remember(vanilla, "past", eta=past())]

    report = rescue(app)
    assert (report.rescued_from_unacked, report.rescued_from_lists) == (2, 2)

    # A short visibility timeout makes kombu restore anything left in ``unacked`` at
    # once, so a copy the rescue failed to remove would run a second time here.
    options = {
        "visibility_timeout": 1,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
    with celery_process(
        "worker", redis_server.url, {"broker_transport_options": options}, "-P", "solo"
    ):
        wait_until(lambda: len(runs(redis_client)) >= 6, timeout=30)
        # Nothing delayed, queued, unacked or held any more: no copy is left to run.
        wait_until_quiescent(app, workers=1)

    executions = runs(redis_client)
    assert Counter(r["id"] for r in executions) == Counter(s.id for s in held + queued + others)
    for run in executions:
        if run["label"] not in ("now", "past"):
            assert run["at"] >= datetime.fromisoformat(run["eta"]).timestamp(), run["label"]
    assert in_store(app) == {}
