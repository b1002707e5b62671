"""Atomic consume on the Redis broker (brokers/redis/consume.py), on a real Redis through
real kombu channels: ours, and stock kombu's beside it as the reference."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from kombu import Consumer, Exchange, Queue
from kombu.utils.json import loads

from celery_delayq.brokers.redis.replies import SOURCES
from celery_delayq.testing import wait_until as wait_for

from ...helpers import VISIBILITY, channel_of, drain, watched

pytestmark = pytest.mark.integration


def publish(channel: Any, queue: str, body: Any, **options: Any) -> None:
    Queue(queue, Exchange(queue), routing_key=queue)(channel).declare()
    channel.connection.client.Producer(channel).publish(
        body, exchange=queue, routing_key=queue, **options
    )


@contextmanager
def consuming(channel: Any, queues: list[str], **options: Any) -> Iterator[list[Any]]:
    """A kombu consumer on ``queues``; the messages it receives, in order, unacknowledged."""
    received: list[Any] = []
    declared = [Queue(name, Exchange(name), routing_key=name) for name in queues]
    with Consumer(channel, declared, callbacks=[lambda _, m: received.append(m)], **options):
        yield received


def blocked_on(client: redis.Redis, command: str) -> int:
    """How many clients wait in ``command`` (blmove: ours; brpop: kombu's)."""
    return sum(1 for c in client.client_list() if c["cmd"] == command and "b" in c["flags"])


def unacked_entry(client: redis.Redis, tag: str) -> list[Any]:
    return loads(client.hget("unacked", tag))  # type: ignore[no-any-return]


@pytest.mark.promise("consume-atomic")
def test_a_queued_message_is_taken_and_recorded_as_kombu_records_it(app, redis_client) -> None:
    with channel_of(app) as channel:
        publish(channel, "q", {"n": 1})
        with consuming(channel, ["q"]) as received:
            assert drain(channel)
        (message,) = received
        assert redis_client.llen("q") == 0
        entry = unacked_entry(redis_client, message.delivery_tag)
        # kombu's [payload, exchange, routing key], naming the default exchange and the queue
        # it was taken from: a restore puts it back there whatever its exchange routes to
        assert entry == [message._raw, "", "q"]
        assert redis_client.zscore("unacked_index", message.delivery_tag) is not None
        message.ack()
    assert redis_client.hlen("unacked") == redis_client.zcard("unacked_index") == 0


@pytest.mark.promise("consume-atomic")
def test_a_waiting_consumer_takes_a_new_message_through_its_landing_list(app, redis_client) -> None:
    with channel_of(app) as channel, consuming(channel, ["q"]) as received:
        assert not drain(channel, timeout=0.3)  # every list empty: the waits are sent
        wait_for(lambda: blocked_on(redis_client, "blmove") == 4)  # one per priority list
        with channel_of(app) as producer:
            publish(producer, "q", {"n": 2})
        assert drain(channel)
        (message,) = received
        assert message.payload == {"n": 2}
        assert unacked_entry(redis_client, message.delivery_tag)[0] == message._raw
        landings = redis_client.smembers("_delayq.landings")
        assert len(landings) == 4
        assert all(redis_client.llen(b"_delayq.landing." + m) == 0 for m in landings)
        message.ack()
    # closed: the waits' connections are gone, and the lease with them
    wait_for(lambda: blocked_on(redis_client, "blmove") == 0)
    assert redis_client.keys("_delayq.consumer.*") == []


def deliveries(channel: Any, queues: list[str], count: int) -> list[Any]:
    """Take ``count`` messages one at a time (prefetch 1, each acked): their bodies."""
    taken = []
    with consuming(channel, queues, prefetch_count=1) as received:
        while len(taken) < count:
            assert drain(channel)
            message = received.pop()
            taken.append(message.payload)
            message.ack()
    return taken


def publish_mixed(channel: Any) -> None:
    for n in range(6):
        for queue in ("a", "b"):
            publish(channel, queue, {"q": queue, "n": n}, priority=(n * 3) % 10)


@pytest.mark.parametrize("how", ["consume", "get"])
@pytest.mark.promise("consume-as-kombu")
def test_priorities_and_the_rotation_over_queues_are_kombus(
    how, app, redis_server, redis_client
) -> None:
    """The same messages come out in the same order from stock kombu and from ours."""
    orders = []
    for side in (redis_server.url, app):
        with channel_of(side) as channel:
            publish_mixed(channel)
            if how == "consume":
                orders.append(deliveries(channel, ["a", "b"], 12))
            else:
                got = [Queue(q)(channel).get(no_ack=True) for q in ["a"] * 6 + ["b"] * 6]
                orders.append([message.payload for message in got])
        assert redis_client.hlen("unacked") == 0
    assert orders[0] == orders[1]
    assert len(orders[0]) == 12 and orders[0][0]["n"] == 0  # priority 0 is highest in kombu


@pytest.mark.promise("consume-as-kombu")
def test_prefetch_is_kept_and_a_message_that_lands_on_a_full_consumer_goes_back(
    app, redis_client
) -> None:
    with channel_of(app) as channel, consuming(channel, ["q"], prefetch_count=1) as received:
        assert not drain(channel, timeout=0.3)
        wait_for(lambda: blocked_on(redis_client, "blmove") == 4)
        with channel_of(app) as producer:
            publish(producer, "q", {"n": 1})
            assert drain(channel)  # lands on the plain list's wait: now full
            publish(producer, "q", {"n": 2}, priority=9)  # lands on a waiting priority list
            publish(producer, "q", {"n": 3})
        assert not drain(channel, timeout=0.5)
        assert [m.payload for m in received] == [{"n": 1}]
        high = "q\x06\x169"
        assert redis_client.llen(high) == 1 and redis_client.llen("q") == 1  # given back
        received[0].ack()
        assert drain(channel)
        assert received[1].payload == {"n": 3}  # priority 0 is kombu's highest on Redis


@pytest.mark.promise("consume-as-kombu")
def test_a_no_ack_consumer_records_nothing(app, redis_client) -> None:
    with channel_of(app) as channel:
        publish(channel, "q", {"n": 1})
        with consuming(channel, ["q"], no_ack=True) as received:
            assert drain(channel)
            assert not drain(channel, timeout=0.3)
            with channel_of(app) as producer:
                publish(producer, "q", {"n": 2})
            assert drain(channel)
        assert [m.payload for m in received] == [{"n": 1}, {"n": 2}]
        assert redis_client.hlen("unacked") == 0


@pytest.mark.promise("consume-as-kombu")
def test_basic_get_records_the_message(app, redis_client) -> None:
    with channel_of(app) as channel:
        publish(channel, "q", {"n": 1})
        message = Queue("q")(channel).get(no_ack=False)
        assert unacked_entry(redis_client, message.delivery_tag)[0] == message._raw
        assert Queue("q")(channel).get(no_ack=False) is None
        message.ack()
    assert redis_client.hlen("unacked") == 0


@pytest.mark.promise("rolling-upgrade-restores-both-ways")
def test_stock_kombu_restores_what_ours_took(app, redis_server, redis_client) -> None:
    with channel_of(app) as ours, channel_of(redis_server.url) as stock:
        publish(ours, "q", {"n": 1})
        taken = Queue("q")(ours).get(no_ack=False)
        wait_for(lambda: redis_client.zcard("unacked_index") == 1)
        score = redis_client.zscore("unacked_index", taken.delivery_tag)
        wait_for(lambda: redis_client.time()[0] > score + VISIBILITY)  # Redis's own clock
        stock.qos.restore_visible(num=10, interval=1)
        assert redis_client.hlen("unacked") == 0
        (back,) = [loads(raw) for raw in redis_client.lrange("q", 0, -1)]
        assert back["properties"]["delivery_tag"] == taken.delivery_tag
        assert back["properties"]["delivery_info"]["redelivered"] is True


@pytest.mark.promise("consume-as-kombu")
def test_with_global_keyprefix_every_key_is_prefixed(make_app, redis_client) -> None:
    app = make_app()
    with channel_of(app, global_keyprefix="pfx:") as channel:
        publish(channel, "q", {"n": 1})
        with consuming(channel, ["q"]) as received:
            assert drain(channel)
            assert not drain(channel, timeout=0.3)
            wait_for(lambda: blocked_on(redis_client, "blmove") == 4)
            publish(channel, "q", {"n": 2})
            assert drain(channel)
        assert len(received) == 2
        keys = {key.decode() for key in redis_client.keys("*")}
        assert keys and all(key.startswith("pfx:") for key in keys), keys
        assert redis_client.hlen("pfx:unacked") == 2


def test_consuming_goes_on_after_redis_forgets_the_scripts(app, redis_client) -> None:
    with channel_of(app) as channel, consuming(channel, ["q"]) as received:
        publish(channel, "q", {"n": 1})
        redis_client.script_flush()
        drain(channel, timeout=0.3)  # the reply is NOSCRIPT: the script is loaded again
        while not received:
            assert drain(channel)
        assert not drain(channel, timeout=0.3)
        wait_for(lambda: blocked_on(redis_client, "blmove") == 4)
        redis_client.script_flush()
        with channel_of(app) as producer:
            publish(producer, "q", {"n": 2})
        assert drain(channel)
        assert [m.payload for m in received] == [{"n": 1}, {"n": 2}]


def test_a_queue_key_that_is_not_a_list_stops_only_itself(app, redis_client, caplog) -> None:
    """Redis refuses the consume call and the wait on it (WRONGTYPE): the consumer logs it
    and goes on taking the other queue's messages, before and after it waits."""
    # Its own level: a worker run in this process earlier may have left the root at ERROR.
    caplog.set_level(logging.WARNING, logger="celery_delayq.brokers.redis.consume")
    with channel_of(app) as channel:
        publish(channel, "q", {"n": 1})
        with consuming(channel, ["bad", "q"]) as received:
            redis_client.set("bad", "not a list")  # after kombu's declare, which reads it
            assert drain(channel)  # taken by a wait: the consume call reached "bad" first
            assert not drain(channel, timeout=0.3)
            with channel_of(app) as producer:
                publish(producer, "q", {"n": 2})
            assert drain(channel)
        assert [m.payload for m in received] == [{"n": 1}, {"n": 2}]
    assert "WRONGTYPE" in caplog.text and redis_client.get("bad") == b"not a list"


def test_the_setting_off_gives_kombus_brpop(make_app, redis_client) -> None:
    app = make_app(delayq_reliable_consume=False)
    with channel_of(app) as channel, consuming(channel, ["q"]):
        assert not drain(channel, timeout=0.3)
        wait_for(lambda: blocked_on(redis_client, "brpop") == 1)
        assert blocked_on(redis_client, "blmove") == 0


@pytest.mark.parametrize("side", ["stock", "ours"])
@pytest.mark.promise("consume-killed-waiter-loses-nothing", "ready-never-lost")
def test_a_consumer_killed_with_a_message_taken_but_unread(
    side, app, redis_server, redis_client
) -> None:
    """The consumer waits, is frozen (SIGSTOP), a message is published, Redis hands it
    over, and the consumer is SIGKILLed before it reads the reply. Stock kombu's BRPOP had
    taken it off the list: it is gone. Ours had moved it to its landing list: once the
    consumer's lease runs out, a restore puts it back at the head of its queue."""
    consumer = watched(
        [sys.executable, "-m", "tests.consumer_process", redis_server.url, "q", side, "1"],
        "consumer",
    )
    try:
        waiting = "brpop" if side == "stock" else "blmove"
        wait_for(lambda: blocked_on(redis_client, waiting) >= 1, timeout=30)
        os.kill(consumer.pid, signal.SIGSTOP)
        with channel_of(redis_server.url) as producer:
            publish(producer, "q", {"n": 1})
        wait_for(lambda: redis_client.llen("q") == 0)  # Redis handed it over
    finally:
        consumer.kill()
        consumer.wait()
    assert consumer.output == ""  # never received
    if side == "stock":
        assert redis_client.hlen("unacked") == 0 and redis_client.llen("q") == 0  # lost
        return
    assert redis_client.llen("q") == 0
    with channel_of(app) as restorer:
        wait_for(lambda: not redis_client.keys("_delayq.consumer.*"), timeout=10)
        restorer.qos.restore_visible(num=10, interval=1)
        assert redis_client.llen("q") == 1
        assert redis_client.scard("_delayq.landings") == 0
        message = Queue("q")(restorer).get(no_ack=False)
        assert message.payload == {"n": 1}
        message.ack()


def test_the_scripts_are_packaged() -> None:
    assert set(SOURCES) == {"consume", "return_landed", "name"}
