"""Drop-in parity with kombu's plain Redis transport for the APIs that act on a queue by
name: purge counts and removes delayed messages too, a move refreshes a queue's
x-expires like a publish does, deleting a queue deletes its delayed messages, and a
queue's size counts only the messages that are ready (as RabbitMQ counts them)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import kombu
import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

pytestmark = pytest.mark.integration

TRANSPORTS = {"plain kombu": "redis", "celery-delayq": "celery_delayq.transport:Transport"}
SEP = "\x06\x16"  # kombu's separator of priority sub-lists


def send(app: Celery, **options: object) -> None:
    app.send_task("tests.remember", ("x",), **options)


def delayed_left(app: Celery) -> int:
    return sum(queue.pending for queue in celery_delayq.backlog(app))


@pytest.mark.parametrize("transport", TRANSPORTS.values(), ids=TRANSPORTS.keys())
def test_purge_with_no_worker_running_counts_and_removes_delayed_tasks_like_vanilla(
    make_app: Callable[..., Celery], redis_client: redis.Redis, transport: str
) -> None:
    """``celery purge`` (app.control.purge) with two tasks sent with countdown=3600, one
    with a high priority, and one due now: every one is counted and gone, on both."""
    app = make_app(broker_transport=transport)
    send(app, countdown=3600)
    send(app, countdown=3600, priority=9)
    send(app)

    assert app.control.purge() == 3

    assert [key for key in redis_client.scan_iter("default*")] == []
    if transport != "redis":
        assert delayed_left(app) == 0


def test_purge_leaves_other_queues_and_their_delayed_tasks_alone(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    other = make_app(task_default_queue="other")
    send(other, countdown=3600)
    app = make_app()  # knows only its queue, "default"
    send(app, countdown=3600)

    assert app.control.purge() == 1

    assert {q.queue: q.pending for q in celery_delayq.backlog(app)} == {"other": 1}


def publish_to_expiring_queue(app: Celery, queue: Queue, eta: datetime | None) -> None:
    """Publish on a channel that declared ``queue`` (so kombu knows its x-expires)."""
    headers = {"eta": eta.isoformat()} if eta else {}
    with app.connection_for_write() as connection:
        producer = connection.Producer()
        producer.publish({"n": 1}, routing_key=queue.name, declare=[queue], headers=headers)


def move_when_due(app: Celery) -> None:
    """Move the one pending delayed message once it is due (as a mover would)."""
    with open_store(app) as store:
        wait_until(lambda: store.move_all_due().moved == 1, what="the message was due and moved")


def test_a_move_refreshes_x_expires_of_the_queue_lists_as_a_publish_does(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_app()
    queue = Queue("expiring", expires=30)  # x-expires: 30,000 ms
    redis_client.rpush(f"expiring{SEP}3", b"waiting in a priority sub-list")
    publish_to_expiring_queue(app, queue, eta=None)  # the vanilla reference: a plain put
    expected = {key: redis_client.pttl(key) for key in ("expiring", f"expiring{SEP}3")}
    if expected == {"expiring": -1, f"expiring{SEP}3": -1}:
        pytest.skip(f"kombu {kombu.__version__} does not expire Redis queue lists (5.7 does)")
    assert all(0 < ttl <= 30_000 for ttl in expected.values()), expected
    for key in expected:
        redis_client.persist(key)

    publish_to_expiring_queue(app, queue, eta=datetime.now(timezone.utc) + timedelta(seconds=1))
    assert redis_client.llen("expiring") == 1  # the delayed one waits in the store
    assert redis_client.pttl("expiring") == -1
    move_when_due(app)

    assert redis_client.llen("expiring") == 2
    for key in expected:
        assert 0 < redis_client.pttl(key) <= 30_000, key


def test_a_move_into_a_queue_without_x_expires_sets_no_expiry(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_app()
    result = app.send_task("tests.remember", ("x",), countdown=3600)
    assert redis_client.llen("default") == 0  # it waits in the store
    assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1  # now overdue
    move_when_due(app)

    assert redis_client.llen("default") == 1
    assert redis_client.pttl("default") == -1


def test_deleting_a_queue_deletes_its_delayed_tasks_too(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_app()
    queue = Queue("doomed", Exchange("doomed"), routing_key="doomed")  # as Celery declares it
    send(app, countdown=3600, queue="doomed")
    send(app, queue="doomed")
    send(app, countdown=3600)  # another queue's

    with app.connection_for_write() as connection:
        bound = queue(connection.default_channel)
        bound.declare()
        bound.delete()

    assert redis_client.llen("doomed") == 0
    assert {q.queue: q.pending for q in celery_delayq.backlog(app)} == {"default": 1}


def test_a_queues_size_counts_ready_messages_not_delayed_ones(
    make_app: Callable[..., Celery],
) -> None:
    app = make_app()
    send(app, countdown=3600)
    send(app)

    with app.connection_for_write() as connection:
        _, ready, _ = Queue("default")(connection.default_channel).queue_declare(passive=True)

    assert ready == 1
