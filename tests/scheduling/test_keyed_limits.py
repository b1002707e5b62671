"""A delay key of a flow-controlled task: held while its message waits for its ETA in the
schedule, free once the message, due, waits for its limit in its bucket (the same-Redis
move, and the claim of a hand-over to RabbitMQ)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.core.layout.record import task_key

from .test_bulk_limits import LIMITED, SETTINGS, limited_task
from .test_keyed import move_all

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "amqp"])
def limited_app(request, make_app, make_amqp_app) -> Iterator[Celery]:
    """An app whose LIMITED task runs one a minute, on a Redis broker or on RabbitMQ."""
    yield make_app(**SETTINGS) if request.param == "redis" else make_amqp_app(**SETTINGS)


@pytest.mark.promise("keyed-limited-freed-in-bucket")
def test_a_limited_tasks_delay_key_is_free_once_its_message_waits_in_its_bucket(
    limited_app: Celery,
) -> None:
    task = limited_task(limited_app)
    task.apply_async(("first",))  # in the bucket at publish: the first move releases it
    past = datetime.now(timezone.utc) - timedelta(seconds=1)  # due by any clock's move
    held = celery_delayq.schedule_keyed(task, ("held",), key="k", on_held="keep", eta=past)
    dropped = celery_delayq.schedule_keyed(task, ("x",), key="k", on_held="keep", eta=past)
    assert (held.outcome, dropped.outcome) == ("scheduled", "kept")  # in the schedule: held

    move_all(limited_app)  # releases "first"; "held" enters the bucket, a minute to wait
    with open_store(limited_app) as store:
        (message,) = store.find(held.id)  # its queue: on RabbitMQ, named by its destination
        bucket = store.keys.for_queue(message.queue).gate("w", bucket_of(LIMITED))
        assert store.client.lrange(bucket, 0, -1) == [task_key(held.id)]

    again = celery_delayq.schedule_keyed(task, ("next",), key="k", on_held="keep", countdown=600)
    assert again.outcome == "scheduled" and again.id != held.id
