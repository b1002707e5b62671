"""Unacknowledged messages come back without kombu's mutex (brokers/redis/restore.py), on
a real Redis through real kombu channels: ours, and stock kombu's beside it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from kombu import Queue
from kombu.utils.json import loads

from celery_delayq.brokers.redis.restore import REDELIVERIES_HEADER

from ...helpers import VISIBILITY, channel_of, parse_metrics, scrape

pytestmark = pytest.mark.integration

#: What a worker SIGKILLed inside kombu's restore leaves: the lock, for 300 s.
DEAD_HOLDER = ("unacked_mutex", "a-dead-worker", 300)


def take_unacknowledged(channel: Any, queue: str, count: int = 1) -> list[Any]:
    """Publish ``count`` messages to ``queue`` and take them without acknowledging."""
    declared = Queue(queue)(channel)
    declared.declare()
    producer = channel.connection.client.Producer(channel)
    for n in range(count):
        producer.publish({"n": n}, routing_key=queue)
    return [declared.get(no_ack=False) for _ in range(count)]


def wait_until_visible(redis_client: redis.Redis) -> None:
    """Until every unacknowledged message is older than the visibility timeout."""
    newest = max(score for _, score in redis_client.zrange("unacked_index", 0, -1, withscores=True))
    while time.time() - newest <= VISIBILITY:  # a clock, not a guess: the entries' own time
        time.sleep(0.05)


def queued(redis_client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    return [loads(raw) for raw in redis_client.lrange(queue, 0, -1)]


@pytest.mark.promise("restore-without-lock", "redeliveries-counted")
def test_a_mutex_left_by_a_dead_worker_stalls_kombu_but_not_ours(
    app, redis_server, redis_client
) -> None:
    queue = app.conf.task_default_queue
    with channel_of(redis_server.url) as stock, channel_of(app) as ours:
        take_unacknowledged(stock, queue)
        redis_client.set(DEAD_HOLDER[0], DEAD_HOLDER[1], ex=DEAD_HOLDER[2])
        wait_until_visible(redis_client)

        stock.qos.restore_visible(num=10, interval=1)
        assert queued(redis_client, queue) == []  # stock kombu waits out the lock: 300 s
        assert redis_client.hlen("unacked") == 1

        ours.qos.restore_visible(num=10, interval=1)
    (message,) = queued(redis_client, queue)
    assert redis_client.hlen("unacked") == redis_client.zcard("unacked_index") == 0
    assert message["headers"][REDELIVERIES_HEADER] == 1
    assert message["headers"]["redelivered"] is True
    assert message["properties"]["delivery_info"]["redelivered"] is True
    assert redis_client.get(DEAD_HOLDER[0]) == DEAD_HOLDER[1].encode()  # left alone


@pytest.mark.promise("redeliveries-counted")
def test_each_redelivery_is_counted(app, redis_client) -> None:
    queue = app.conf.task_default_queue
    with channel_of(app) as channel:
        take_unacknowledged(channel, queue)
        for round_ in (1, 2, 3):
            wait_until_visible(redis_client)
            channel.qos.restore_visible(num=10, interval=1)
            message = Queue(queue)(channel).get(no_ack=False)
            assert message.headers[REDELIVERIES_HEADER] == round_
        message.ack()
    assert redis_client.hlen("unacked") == 0 and queued(redis_client, queue) == []


@pytest.mark.promise("restored-once")
def test_racing_restorers_put_each_message_back_once(app, redis_client) -> None:
    queue = app.conf.task_default_queue
    start = threading.Barrier(3)

    def restore() -> None:
        with channel_of(app) as channel:
            start.wait()
            channel.qos.restore_visible(num=100, interval=1)

    # the taker stays open: closing a channel gives back what it took (kombu's
    # restore at shutdown), which would leave nothing to race for
    with channel_of(app) as taker:
        taken = take_unacknowledged(taker, queue, count=60)
        wait_until_visible(redis_client)
        threads = [threading.Thread(target=restore) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        restored = sorted(m["properties"]["delivery_tag"] for m in queued(redis_client, queue))
        assert restored == sorted(message.delivery_tag for message in taken)  # each once
        assert redis_client.hlen("unacked") == 0
    assert len(queued(redis_client, queue)) == 60  # and the taker's close added none


def test_the_setting_off_gives_kombus_own_restore(make_app, redis_client) -> None:
    app = make_app(delayq_reliable_consume=False)
    queue = app.conf.task_default_queue
    with channel_of(app) as channel:
        take_unacknowledged(channel, queue)
        redis_client.set(DEAD_HOLDER[0], DEAD_HOLDER[1], ex=DEAD_HOLDER[2])
        wait_until_visible(redis_client)
        channel.qos.restore_visible(num=10, interval=1)
        assert queued(redis_client, queue) == []  # the lock holds it, as in stock kombu
        redis_client.delete(DEAD_HOLDER[0])
        channel.qos.restore_visible(num=10, interval=1)
    (message,) = queued(redis_client, queue)
    assert REDELIVERIES_HEADER not in message["headers"]


@pytest.mark.parametrize("value", ["yes", 1])
def test_the_setting_is_checked(make_app, value: Any) -> None:
    from celery_delayq.config.settings import config_of

    with pytest.raises(Exception, match="delayq_reliable_consume must be True or False"):
        config_of(make_app(delayq_reliable_consume=value))


@pytest.mark.promise("long-task-not-redelivered")
def test_a_live_channel_renews_what_it_holds_and_a_restore_leaves_it_alone(
    app, redis_client
) -> None:
    queue = app.conf.task_default_queue
    with channel_of(app) as holder, channel_of(app) as restorer:
        kept, acked = take_unacknowledged(holder, queue, count=2)
        acked.ack()
        wait_until_visible(redis_client)  # the lease ran out...
        assert holder.qos.renew_leases() == 1  # ...and is renewed, for the held one only
        assert redis_client.zrange("unacked_index", 0, -1) == [kept.delivery_tag.encode()]

        restorer.qos.restore_visible(num=10, interval=1)
        assert queued(redis_client, queue) == []  # a live holder's message stays taken

        wait_until_visible(redis_client)  # no renewal since: as if its worker died
        restorer.qos.restore_visible(num=10, interval=1)
        (message,) = queued(redis_client, queue)
        assert message["properties"]["delivery_tag"] == kept.delivery_tag


def test_restores_and_renewals_keep_kombus_global_keyprefix(app, redis_client) -> None:
    """Every key is the prefixed one (an ACL user may own only those: test_security)."""
    queue = app.conf.task_default_queue
    app.conf.broker_transport_options = {"visibility_timeout": VISIBILITY, "global_keyprefix": "p:"}
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        take_unacknowledged(channel, queue)
        assert channel.qos.renew_leases() == 1
        newest = max(s for _, s in redis_client.zrange("p:unacked_index", 0, -1, withscores=True))
        while time.time() - newest <= VISIBILITY:
            time.sleep(0.05)
        channel.qos.restore_visible(num=10, interval=1)
        assert redis_client.llen(f"p:{queue}") == 1 and redis_client.hlen("p:unacked") == 0
    assert not redis_client.exists("unacked", "unacked_index", queue)


def test_redeliveries_are_counted_per_queue_in_the_metrics(app, redis_client) -> None:
    pytest.importorskip("prometheus_client")
    queue = app.conf.task_default_queue
    with channel_of(app) as channel:
        take_unacknowledged(channel, queue, count=2)
        wait_until_visible(redis_client)
        channel.qos.restore_visible(num=10, interval=1)  # two leases ran out
        Queue(queue)(channel).get(no_ack=False).reject(requeue=True)  # and one requeue
        take_unacknowledged(channel, "other")
        wait_until_visible(redis_client)
        channel.qos.restore_visible(num=10, interval=1)
    _, samples = parse_metrics(scrape(app))
    assert samples["celery_delayq_redelivered_total"] == {
        (("queue", queue),): 3,
        (("queue", "other"),): 1,
    }


@pytest.mark.promise("restore-scan-every-interval")
def test_a_channel_scans_once_per_restore_interval_whatever_the_throttle(app, redis_client) -> None:
    """kombu scans on every 10th call (``unacked_restore_throttle``): with a worker's
    10 s between calls, every 100 s. Ours scans when ``unacked_restore_interval`` has
    passed since the channel's last scan."""
    queue = app.conf.task_default_queue
    with channel_of(app, unacked_restore_interval=10, unacked_restore_throttle=10) as channel:
        take_unacknowledged(channel, queue)
        wait_until_visible(redis_client)
        channel.qos.restore_visible(num=10, interval=10)  # the first call scans
        assert len(queued(redis_client, queue)) == 1
        Queue(queue)(channel).get(no_ack=False)
        wait_until_visible(redis_client)
        channel.qos.restore_visible(num=10, interval=10)  # scanned under 10 s ago
        assert queued(redis_client, queue) == []
        channel.qos._last_scan -= 10  # as if 10 s had passed
        channel.qos.restore_visible(num=10, interval=10)  # the 3rd call: kombu would wait
        assert len(queued(redis_client, queue)) == 1


@pytest.mark.parametrize("since_listed", ["taken again", "renewed"])
@pytest.mark.promise("restore-rechecks-expiry")
def test_a_message_held_again_since_it_was_listed_is_not_restored(
    since_listed, app, redis_client
) -> None:
    """Without kombu's lock, restorers work from lists that may be stale: another worker
    restored the message and a consumer took it again (the same delivery tag, scored
    anew), or its holder renewed its lease. The chaos run found the first: one message
    restored three times, and run three times. kombu's per-tag restore would put it
    back; ours checks the score in the same transaction."""
    queue = app.conf.task_default_queue
    with channel_of(app) as holder, channel_of(app) as restorer:
        (taken,) = take_unacknowledged(holder, queue)
        wait_until_visible(redis_client)
        listed_under = time.time() - VISIBILITY  # a restorer lists it now
        if since_listed == "taken again":
            with restorer.conn_or_acquire() as client:
                restorer.qos.restore_expired(taken.delivery_tag, listed_under, client)
            assert len(queued(redis_client, queue)) == 1  # restored once
            Queue(queue)(holder).get(no_ack=False)
        else:
            assert holder.qos.renew_leases() == 1
        with restorer.conn_or_acquire() as client:
            restorer.qos.restore_expired(taken.delivery_tag, listed_under, client)
        assert queued(redis_client, queue) == []  # not restored: it is held
        assert redis_client.hexists("unacked", taken.delivery_tag)
        with restorer.conn_or_acquire() as client:
            restorer.qos.restore_by_tag(taken.delivery_tag, client)  # kombu's: no check
        assert len(queued(redis_client, queue)) == 1  # a second copy of a held message


def test_the_restore_check_reads_the_prefixed_index(app, redis_client) -> None:
    queue = app.conf.task_default_queue
    with channel_of(app, global_keyprefix="pfx:") as holder:
        (taken,) = take_unacknowledged(holder, queue)
        (score,) = [s for _, s in redis_client.zrange("pfx:unacked_index", 0, -1, withscores=True)]
        with holder.conn_or_acquire() as client:
            holder.qos.restore_expired(taken.delivery_tag, score - 1, client)  # not expired
            assert redis_client.llen(f"pfx:{queue}") == 0
            holder.qos.restore_expired(taken.delivery_tag, score, client)  # expired
        assert redis_client.llen(f"pfx:{queue}") == 1
        assert redis_client.hlen("pfx:unacked") == 0
