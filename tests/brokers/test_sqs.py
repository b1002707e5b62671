"""Delayed tasks on SQS (moto's server, an emulator of AWS SQS): the schedule waits in
Redis, past SQS's 15-minute delay cap and its visibility timeout, and reaches the SQS
queue through kombu's own put when due."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from celery import Celery

import celery_delayq
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store import Scheduled
from celery_delayq.ops.api import deliver_all_due

pytestmark = pytest.mark.integration


def sqs_messages(app: Celery, queue: str) -> list[dict[str, Any]]:
    """The kombu envelopes waiting in the SQS queue now (received and deleted)."""
    options = app.conf.broker_transport_options
    with app.connection_for_write() as connection:
        url = connection.default_channel.endpoint_url
    client = boto3.client(
        "sqs",
        region_name=options["region"],
        endpoint_url=url,
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    queue_url = client.get_queue_url(QueueName=queue)["QueueUrl"]
    found: list[dict[str, Any]] = []
    while True:
        reply = client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
        if not reply.get("Messages"):
            return found
        for message in reply["Messages"]:
            found.append(json.loads(base64.b64decode(message["Body"])))
            client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def test_a_delay_beyond_sqs_limits_waits_in_redis_and_reaches_the_queue_when_due(
    make_sqs_app: Callable[..., Celery],
) -> None:
    app = make_sqs_app()
    queue = app.conf.task_default_queue
    later = app.send_task("tests.remember", countdown=24 * 3600)  # SQS: at most 15 min
    now = app.send_task("tests.remember")

    assert [m["headers"]["id"] for m in sqs_messages(app, queue)] == [now.id]
    assert celery_delayq.backlog(app)[0].pending == 1

    assert celery_delayq.reschedule(app, later.id, countdown=-1) == 1
    assert deliver_all_due(app) == 1

    (delivered,) = sqs_messages(app, queue)
    assert delivered["headers"]["id"] == later.id
    assert delivered["headers"][STABLE_ID_HEADER].startswith(f"{later.id}@")
    assert celery_delayq.backlog(app)[0].pending == 0


def test_cancel_and_purge_work_on_sqs_too(make_sqs_app: Callable[..., Celery]) -> None:
    app = make_sqs_app()
    cancelled = app.send_task("tests.remember", countdown=3600)
    app.send_task("tests.remember", countdown=3600)
    app.send_task("tests.remember")

    assert celery_delayq.cancel(app, cancelled.id) == 1
    # kombu's SQS purge adds up ten reads of the queue size (so its 1 message counts 10),
    # then ours adds the 1 delayed message.
    assert app.control.purge() == 10 + 1
    assert celery_delayq.backlog(app) == []
    assert sqs_messages(app, app.conf.task_default_queue) == []


@pytest.mark.promise("crafted-input-stops-nothing")
def test_a_crafted_message_is_refused_alone_and_dead_lettered_with_the_reason(
    make_sqs_app: Callable[..., Celery],
) -> None:
    """A stored message that is no kombu envelope (written into Redis by hand): the
    message beside it reaches SQS; it is kept as a dead letter with the reason."""
    app = make_sqs_app(delayq_handover_tries=1)
    queue = app.conf.task_default_queue
    fine = app.send_task("tests.remember", countdown=3600)
    assert celery_delayq.reschedule(app, fine.id, countdown=-1) == 1
    with open_store(app) as store:
        due = store.server_time_ms() - 1
        store.schedule_many([Scheduled(queue, "crafted", "crafted", due, queue, b"not json")])
        assert store.move_all_due().moved == 1
        (dead,) = store.dead_letters(queue)
    assert dead.key.endswith(b"crafted") and dead.reason.startswith("unreadable message")
    assert [m["headers"]["id"] for m in sqs_messages(app, queue)] == [fine.id]
