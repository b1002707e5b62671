"""A real ``celery worker`` (on RabbitMQ, on moto's SQS server) whose mover meets a
stored message the broker cannot take: every other delayed task runs once, in its queue
and in another queue, and that message alone is dead-lettered with the reason."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import amqp
import pytest
import redis
from celery import Celery

from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.results import DeadLetter
from celery_delayq.core.store import Scheduled
from celery_delayq.testing import RedisServer, wait_until

from ...helpers import REMEMBER, celery_process, remember, runs
from .test_handover_refusals import sqs_envelope

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


def every_task_runs_once(
    app: Celery,
    broker_url: str,
    settings: dict[str, Any],
    records: RedisServer,
    counts: tuple[int, int],
    timeout: float,
) -> DeadLetter:
    """A worker of the app's queue and of a second one, a stored message the broker
    cannot take due in the first: ``counts`` delayed tasks sent to each queue run once
    (as ``records`` shows); the one dead letter."""
    first = app.conf.task_default_queue
    second = f"{first}-2"
    redis_client = records.client()
    with celery_process(
        "worker", broker_url, settings, "-P", "solo", "-Q", f"{first},{second}",
        record_url=records.url,
    ):  # fmt: skip
        sent = [remember(app, f"first-{i}", countdown=0.5) for i in range(counts[0])]
        sent += [
            remember(app, f"second-{i}", countdown=0.5, queue=second) for i in range(counts[1])
        ]
        wait_until(lambda: len(runs(redis_client)) >= len(sent), timeout=timeout)
        with open_store(app) as store:
            (letter,) = wait_until(lambda: store.dead_letters(), timeout=30)
    assert Counter(run["id"] for run in runs(redis_client)) == Counter(r.id for r in sent)
    return letter


@pytest.mark.slow
def test_a_stored_header_py_amqp_cannot_encode_stops_neither_its_queue_nor_another(
    make_amqp_app: Callable[..., Celery],
    amqp_settings: dict[str, Any],
    rabbitmq_url: str,
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    settings = {**amqp_settings, "delayq_handover_tries": 2, "delayq_handover_backoff": 0.001}
    app = make_amqp_app(**settings)
    first = app.conf.task_default_queue
    bad_id = str(uuid.uuid4())
    bad = amqp.Message(
        b"[[], {}, {}]", application_headers={"id": bad_id, "task": REMEMBER, "x": uuid.uuid4()}
    )
    with open_store(app) as store:  # stored before its publish was checked, or by hand
        due = store.server_time_ms() - 1
        store.schedule_many(
            [Scheduled(first, bad_id, bad_id, due, destination("", first), envelope(bad))]
        )

    letter = every_task_runs_once(app, rabbitmq_url, settings, redis_server, (20, 10), 30)
    assert letter.task_id == bad_id and letter.tries == 2
    assert letter.reason.startswith("cannot be encoded for the broker: FrameSyntaxError: ")


@pytest.mark.slow
def test_stored_message_attributes_botocore_refuses_stop_neither_their_queue_nor_another(
    make_sqs_app: Callable[..., Celery],
    sqs_server: str,
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    app = make_sqs_app(delayq_handover_tries=2, delayq_handover_backoff=0.001)
    first = app.conf.task_default_queue
    settings = {
        key: app.conf[key]
        for key in (
            "broker_transport",
            "delayq_store_url",
            "task_default_queue",
            "delayq_handover_tries",
            "delayq_handover_backoff",
        )
    }
    settings["broker_transport_options"] = {
        **app.conf.broker_transport_options,
        "polling_interval": 0.1,
        "wait_time_seconds": 0,
    }
    bad_id = str(uuid.uuid4())
    with open_store(app) as store:  # stored before its publish was checked, or by hand
        due = store.server_time_ms() - 1
        payload = sqs_envelope(bad_id, message_attributes="zz")
        store.schedule_many([Scheduled(first, bad_id, bad_id, due, first, payload)])

    letter = every_task_runs_once(app, sqs_server, settings, redis_server, (10, 5), 45)
    assert letter.task_id == bad_id and letter.tries == 2
    assert letter.reason.startswith("ParamValidationError: ")
