"""End to end on RabbitMQ: real ``celery worker`` processes, delayed messages in Redis
(``delayq_store_url``), moved by the workers' own movers."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import pytest
from celery import Celery
from kombu import Exchange, Queue

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ...helpers import celery_process, remember, remember_delayed, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


def worker(rabbitmq_url: str, settings: dict[str, Any], redis_url: str, *args: str) -> Any:
    """A solo-pool worker of tests.worker_app on RabbitMQ, recording runs in Redis."""
    return celery_process(
        "worker", rabbitmq_url, settings, "-P", "solo", *args, record_url=redis_url
    )


def nothing_left(app: Celery, queue: str) -> bool:
    """No delayed message in the store, none ready in RabbitMQ, none held by a worker:
    no further run can happen."""
    if any(backlog.pending for backlog in celery_delayq.backlog(app)):
        return False
    with app.connection_for_write() as connection:
        _, ready, _ = Queue(queue)(connection.default_channel).queue_declare(passive=True)
    if ready:
        return False
    inspect = app.control.inspect(timeout=1)
    held = [inspect.active(), inspect.reserved(), inspect.scheduled()]
    return all(reply is not None for reply in held) and not any(
        entries
        for reply in held
        for entries in reply.values()  # type: ignore[union-attr]
    )


@pytest.mark.promise("eta-tasks-wait-in-redis", "rabbitmq-never-before-eta")
def test_delayed_tasks_run_once_each_and_never_before_their_eta(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, redis_client
):
    app = make_amqp_app()
    queue = app.conf.task_default_queue
    with worker(rabbitmq_url, amqp_settings, redis_server.url):
        sent, kept = remember_delayed(app, 0.3, 0.6, 1.0, 1.5)
        urgent, kept_urgent = remember_delayed(app, 1.0, label="urgent", priority=9)
        sent += [*urgent, remember(app, "now")]
        wait_until(lambda: len(runs(redis_client)) >= len(sent), timeout=20)
        wait_until(lambda: nothing_left(app, queue), timeout=20, what="nothing is left to run")

    executions = Counter(run["id"] for run in runs(redis_client))
    assert executions == Counter(result.id for result in sent)
    for run in runs(redis_client):
        if run["eta"] is not None:
            assert run["at"] >= datetime.fromisoformat(run["eta"]).timestamp(), run["label"]
    with open_store(app) as store:
        stats = store.stats(queue)
    # all but "now" waited in Redis, but for one that fell due while it was sent
    assert kept + kept_urgent <= stats["scheduled"] == stats["moved"] <= 5


def test_retries_and_autoretry_backoff_wait_in_redis(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, redis_client
):
    app = make_amqp_app()
    with worker(rabbitmq_url, amqp_settings, redis_server.url):
        retried = app.send_task("tests.worker_app.retry_once", (1,))
        flaky = app.send_task("tests.worker_app.flaky")
        wait_until(lambda: len(runs(redis_client)) == 5, timeout=30)

    by_task: dict[str, list[dict[str, Any]]] = {}
    for run in runs(redis_client):
        by_task.setdefault(run["id"], []).append(run)
    assert [r["retries"] for r in by_task[retried.id]] == [0, 1]
    assert [r["retries"] for r in by_task[flaky.id]] == [0, 1, 2]
    flaky_runs = by_task[flaky.id]
    gaps = [b["at"] - a["at"] for a, b in zip(flaky_runs, flaky_runs[1:])]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0
    with open_store(app) as store:
        stats = store.stats(app.conf.task_default_queue)
    assert (stats["scheduled"], stats["moved"]) == (3, 3)


@pytest.mark.promise("quorum-queues-skip-native-delayed-delivery")
def test_a_quorum_queue_worker_gets_its_delayed_tasks_and_control_still_works(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, redis_client
):
    """Quorum queue on a topic exchange (where Celery would use its native delayed
    delivery): the task waits in Redis, shows in ``inspect scheduled`` and runs once;
    broadcast control (ping, inspect) works on the same broker."""
    name = amqp_settings["task_default_queue"]
    queue = Queue(
        name,
        Exchange(name, type="topic"),
        routing_key=name,
        queue_arguments={"x-queue-type": "quorum"},
    )
    settings = {
        **amqp_settings,
        "task_queues": [queue],
        "broker_transport_options": {"confirm_publish": True},
    }
    app = make_amqp_app(task_queues=[queue], broker_transport_options={"confirm_publish": True})
    hostname = f"quorum-{name}@%h"
    with worker(rabbitmq_url, settings_for_worker(settings), redis_server.url, "-n", hostname):
        later = remember(app, "later", countdown=3600)
        soon = remember(app, "soon", countdown=1)
        pongs = app.control.ping(timeout=2)
        assert len(pongs) == 1
        scheduled = app.control.inspect(timeout=2).scheduled() or {}
        listed = [entry["request"]["id"] for entries in scheduled.values() for entry in entries]
        assert later.id in listed
        wait_until(lambda: [run["id"] for run in runs(redis_client)] == [soon.id], timeout=20)

    assert celery_delayq.cancel(app, later.id) == 1


def settings_for_worker(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings as JSON for tests.worker_app (a kombu Queue is sent as its parts)."""
    queues = [
        {
            "name": q.name,
            "exchange": q.exchange.name,
            "exchange_type": q.exchange.type,
            "routing_key": q.routing_key,
            "queue_arguments": q.queue_arguments,
        }
        for q in settings.get("task_queues", [])
    ]
    return {**settings, "task_queues": queues}
