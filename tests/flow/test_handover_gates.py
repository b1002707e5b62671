"""Flow control on the claim -> publish -> ack hand-over (lua/claim_due.lua), against a
real RabbitMQ and Redis, no worker: a limited task's messages are claimed only as their
bucket releases them, and a released message whose hand-over fails comes back ungated
(lua/handover.lua): it goes out again at once, counted by its limit only once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.gates import Rate
from celery_delayq.core.layout.record import Record, task_id_of
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import wait_until
from celery_delayq.testing.releases import release_log

from ..helpers import claim, take_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

TASK = "tests.remember"
#: A limit whose second release would come a minute after the first: a message made
#: to wait for it again could not go out within a test's waits.
ONCE_A_MINUTE = {"delayq_rate_limits": {TASK: "1/m"}}


def released(store: Any, queue: str) -> list[int]:
    return release_log(store.client, store.keys.for_queue(queue)).get(TASK, [])


def test_the_claim_releases_at_the_rate_and_says_when_the_next_release_is(
    make_amqp_app: Callable[..., Celery],
) -> None:
    app = make_amqp_app(delayq_rate_limits={TASK: "5/s"})
    queue = app.conf.task_default_queue
    sent = [app.send_task(TASK, (i,)) for i in range(3)]  # due now: they wait for the limit
    with open_store(app) as store:
        first = store.move_due(queue)
        stats = store.stats(queue)

    assert first.moved == 1
    interval, catch_up = Rate.parse("5/s").interval_us(), Rate.parse("5/s").catch_up_us()
    assert first.next_due_ms is not None
    assert (interval - catch_up) // 1000 <= first.next_due_ms - first.now_ms <= interval // 1000 + 1
    (message,) = take_all(app, queue)
    assert message.headers["id"] in {result.id for result in sent}
    # the released message waited for its limit, not for a mover: no lateness counted
    assert (stats["gated"], stats["released"], stats.get("moved", 0)) == (3, 1, 0)


@pytest.mark.promise("flow-handover-counted-once")
def test_a_released_message_whose_claim_expired_goes_out_again_counted_once(
    make_amqp_app: Callable[..., Celery],
) -> None:
    app = make_amqp_app(**ONCE_A_MINUTE)
    queue = app.conf.task_default_queue
    app.send_task(TASK)
    with open_store(app) as store:
        (claimed,) = claim(store, queue, "dead-mover", lease_ms=200)  # then it "died"
        lease_over = store.server_time_ms() + 200
        wait_until(lambda: store.server_time_ms() > lease_over, what="the lease is over")
        again = wait_until(lambda: (r := store.move_all_due()).moved and r, what="sent again")
        assert again.moved == 1
        assert len(released(store, queue)) == 1 == store.stats(queue)["released"]

    (message,) = take_all(app, queue)
    assert message.headers["id"] == task_id_of(claimed.key)


@pytest.mark.promise("flow-handover-counted-once")
def test_a_released_message_the_broker_refused_goes_out_again_counted_once(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_amqp_app(**ONCE_A_MINUTE, delayq_handover_backoff=0.001)
    queue = f"later-{app.conf.task_default_queue}"  # the routing key: the store's queue
    lonely = Exchange(f"lonely-{queue}", type="direct")
    sent = app.send_task(TASK, exchange=lonely.name, routing_key=queue)
    with app.connection_for_write() as connection:
        lonely(connection.default_channel).declare()
    assert deliver_all_due(app) == 0  # released, then unroutable: refused

    bound = Queue(f"bound-{queue}", lonely, routing_key=queue)
    with app.connection_for_write() as connection:
        bound(connection.default_channel).declare()
    with open_store(app) as store:
        wait_until(lambda: store.move_all_due().moved, what="sent again after its back-off")
        assert len(released(store, queue)) == 1 == store.stats(queue)["released"]

    (message,) = take_all(app, bound.name)
    assert message.headers["id"] == sent.id
    assert redis_client.keys("*:dead*") == []


@pytest.mark.promise("flow-handover-counted-once")
def test_a_released_message_an_unreachable_broker_left_goes_out_again_counted_once(
    make_amqp_app: Callable[..., Celery],
    app_factory: Callable[..., Celery],
    amqp_settings: dict[str, Any],
) -> None:
    app = make_amqp_app(**ONCE_A_MINUTE)
    queue = app.conf.task_default_queue
    sent = app.send_task(TASK)
    down = app_factory("amqp://guest:guest@127.0.0.1:9//", **amqp_settings, **ONCE_A_MINUTE)
    with open_store(down) as store, pytest.raises(OSError):
        store.move_all_due()

    app.set_current()
    assert deliver_all_due(app) == 1
    with open_store(app) as store:
        assert len(released(store, queue)) == 1 == store.stats(queue)["released"]
    (message,) = take_all(app, queue)
    assert message.headers["id"] == sent.id


def test_a_crafted_gate_length_on_a_failed_hand_over_loses_nothing(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A gate whose length is written with a leading zero (not as record.py writes it)
    is left in the record when its claim expires: the message waits in its bucket again
    and is released a second time, rather than having its record cut wrongly."""
    app = make_amqp_app(delayq_rate_limits={TASK: "5/s"})
    queue = app.conf.task_default_queue
    sent = app.send_task(TASK)
    with open_store(app) as store:
        keys = store.keys.for_queue(queue)
        (key,) = redis_client.hkeys(keys.messages)
        record = redis_client.hget(keys.messages, key)
        gate = Record.decode(record, keys.own_list).gate
        assert gate is not None
        field = b"%d:%s" % (len(gate), gate)
        crafted = record.replace(b"l" + field, b"l0" + field, 1)
        assert Record.decode(crafted, keys.own_list).gate == gate
        redis_client.hset(keys.messages, key, crafted)
        claim(store, queue, "dead-mover", lease_ms=200)
        lease_over = store.server_time_ms() + 200
        wait_until(lambda: store.server_time_ms() > lease_over, what="the lease is over")
        wait_until(lambda: store.move_all_due().moved, what="released again, then sent")
        assert len(released(store, queue)) == 2

    (message,) = take_all(app, queue)
    assert message.headers["id"] == sent.id
    assert redis_client.keys("*:dead*") == []
