"""A Redis broker with its schedule in another Redis (``delayq_store_url``): delayed
messages wait there and reach the broker's queue lists through the claim -> publish ->
ack hand-over; an unreachable store fails the publish as a broker outage would."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import kombu.exceptions
import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store import Scheduled
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import RedisServer

from ...helpers import invoke

pytestmark = pytest.mark.integration


@pytest.fixture
def make_split_app(
    make_app: Callable[..., Celery], store_server, store_client: redis.Redis
) -> Callable[..., Celery]:
    def make(**settings) -> Celery:
        return make_app(delayq_store_url=store_server.url, **settings)

    return make


def overdue(app: Celery, *results) -> None:
    for result in results:
        assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1


def test_a_delayed_task_waits_in_the_store_redis_and_reaches_the_broker_list_when_due(
    make_split_app, redis_client: redis.Redis, store_client: redis.Redis
) -> None:
    app = make_split_app()
    sent = app.send_task("tests.remember", countdown=3600)
    now = app.send_task("tests.remember")

    assert [json.loads(m)["headers"]["id"] for m in redis_client.lrange("default", 0, -1)] == [
        now.id
    ]
    assert not redis_client.keys("delayq*") and store_client.keys("delayq*")
    assert celery_delayq.backlog(app)[0].pending == 1

    overdue(app, sent)
    assert deliver_all_due(app) == 1

    delivered = json.loads(redis_client.lindex("default", 0))
    assert delivered["headers"]["id"] == sent.id
    assert delivered["headers"][STABLE_ID_HEADER].startswith(f"{sent.id}@")
    assert celery_delayq.backlog(app)[0].pending == 0
    assert store_client.keys("*inflight*") == []


@pytest.mark.promise("store-apart-not-a-list-refuses-its-own")
def test_a_destination_that_is_not_a_list_refuses_only_its_messages(
    make_split_app, redis_client: redis.Redis
) -> None:
    app = make_split_app(delayq_handover_tries=1)
    blocked = app.send_task("tests.remember", countdown=3600, queue="blocked")
    fine = app.send_task("tests.remember", countdown=3600)
    redis_client.set("blocked", "not a list")
    overdue(app, blocked, fine)

    assert deliver_all_due(app) == 1

    assert redis_client.llen("default") == 1
    (dead,) = json.loads(invoke(app, "list", "--dead", "--json").output)
    assert dead["id"] == blocked.id and "holds a string, not a list" in dead["reason"]


@pytest.mark.parametrize("payload", [b"not json", b"[1, 2]", b'{"headers": 7}'])
@pytest.mark.promise("crafted-input-stops-nothing")
def test_a_crafted_message_is_refused_alone_and_dead_lettered_with_the_reason(
    make_split_app, redis_client: redis.Redis, store_client: redis.Redis, payload: bytes
) -> None:
    """A stored message that is no kombu envelope (written into the store by hand): the
    messages around it reach their list; it is kept as a dead letter with the reason."""
    app = make_split_app(delayq_handover_tries=1)
    fine = app.send_task("tests.remember", countdown=3600)
    overdue(app, fine)
    with open_store(app) as store:
        due = store.server_time_ms() - 1
        store.schedule_many([Scheduled("default", "crafted", "crafted", due, "default", payload)])
        assert store.move_all_due().moved == 1
    assert [json.loads(m)["headers"]["id"] for m in redis_client.lrange("default", 0, -1)] == [
        fine.id
    ]
    (why,) = store_client.hvals(store_client.keys("*:dead:why")[0])
    assert "unreadable message" in why.decode()
    assert store_client.keys("*inflight*") == []


def test_purge_empties_the_queue_list_and_its_delayed_messages(
    make_split_app, redis_client: redis.Redis
) -> None:
    app = make_split_app()
    app.send_task("tests.remember", countdown=3600)
    app.send_task("tests.remember")

    assert app.control.purge() == 2
    assert redis_client.llen("default") == 0


@pytest.mark.promise("store-down-publish-fails-clean")
def test_an_unreachable_store_fails_the_publish_like_a_broker_outage(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """kombu's OperationalError after Celery's publish retries; nothing is written."""
    app = make_app(delayq_store_url="redis://127.0.0.1:9/0")
    policy = {"max_retries": 1, "interval_start": 0, "interval_step": 0.01}

    with pytest.raises(kombu.exceptions.OperationalError, match="delayq_store_url"):
        app.send_task("tests.remember", countdown=60, retry_policy=policy)

    assert redis_client.llen("default") == 0


@pytest.mark.promise("store-outage-ridden-out", "store-apart-rides-out-restart")
def test_publish_retries_against_a_failed_store_are_spaced_out(
    make_app: Callable[..., Celery],
) -> None:
    """kombu retries a publish at once when the broker is fine; the store's outage makes
    each attempt wait longer first (0.05 s doubling up to 1 s), so the retry policy's
    count buys time to ride out a restart or a failover."""
    app = make_app(delayq_store_url="redis://127.0.0.1:9/5")  # nobody listens there
    attempts: list[float] = []
    policy = {"max_retries": 4, "errback": lambda exc, interval: attempts.append(time.monotonic())}

    with pytest.raises(kombu.exceptions.OperationalError, match="delayq_store_url"):
        app.send_task("tests.remember", countdown=60, retry_policy=policy)

    gaps = [later - earlier for earlier, later in zip(attempts, attempts[1:])]
    assert len(gaps) == 3
    assert all(gap >= least for gap, least in zip(gaps, (0.05, 0.1, 0.2)))


@pytest.mark.promise("store-outage-ridden-out", "store-apart-rides-out-restart")
def test_a_publish_rides_out_a_store_restart(
    make_app: Callable[..., Celery], store_server: RedisServer, store_client: redis.Redis
) -> None:
    """The store is down when ``apply_async`` starts and back while it retries: the call
    returns and the task is stored once."""
    app = make_app(delayq_store_url=store_server.url)
    app.send_task("tests.remember", countdown=60)  # connected before the outage
    store_server.stop(kill=True)
    retries = threading.Semaphore(0)
    sent: list[str] = []
    policy = {"max_retries": 8, "errback": lambda exc, interval: retries.release()}
    publisher = threading.Thread(
        target=lambda: sent.append(
            app.send_task("tests.remember", countdown=60, retry_policy=policy).id
        )
    )
    try:
        publisher.start()
        assert retries.acquire(timeout=30) and retries.acquire(timeout=30)  # it failed twice
    finally:
        store_server.start()  # the session's: back for the next tests too
    publisher.join(timeout=30)

    assert len(sent) == 1
    with open_store(app) as store:
        assert len(store.find(sent[0])) == 1
