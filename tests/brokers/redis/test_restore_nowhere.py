"""A restore puts every message back in a queue or in the dead letters, never nowhere: a
message whose delivery info names an exchange with no bindings, taken by a consumer that
then dies, came back to no queue, no unacked entry and no dead letter (real Redis, real
kombu channels: ours, and stock kombu's)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from kombu import Queue

from celery_delayq.brokers.connect import open_store
from celery_delayq.brokers.redis.restore import REDELIVERIES_HEADER

from ...helpers import channel_of
from .test_restore import queued, wait_until_visible

pytestmark = [
    pytest.mark.integration,
    pytest.mark.promise("ready-never-lost", "restore-never-nowhere"),
]


def publish_routed_nowhere(channel: Any, redis_client: redis.Redis, queue: str) -> None:
    """One message in ``queue`` whose delivery info names an exchange bound to nothing."""
    Queue(queue)(channel).declare()
    channel.connection.client.Producer(channel).publish({"n": 1}, routing_key=queue)
    envelope = json.loads(redis_client.rpop(queue))
    envelope["properties"]["delivery_info"].update(exchange="gone", routing_key="gone-key")
    redis_client.rpush(queue, json.dumps(envelope))


def test_a_message_our_consumer_took_comes_back_to_the_queue_it_was_taken_from(
    app: Any, redis_client: redis.Redis
) -> None:
    queue = app.conf.task_default_queue
    with channel_of(app) as dead, channel_of(app) as alive:
        publish_routed_nowhere(dead, redis_client, queue)
        assert Queue(queue)(dead).get(no_ack=False) is not None  # taken, never acked
        wait_until_visible(redis_client)
        alive.qos.restore_visible(num=10, interval=1)
    (message,) = queued(redis_client, queue)
    assert message["body"] and message["headers"][REDELIVERIES_HEADER] == 1
    assert redis_client.hlen("unacked") == 0


def test_a_message_a_stock_kombu_consumer_took_goes_to_the_dead_letters(
    app: Any, redis_server: Any, redis_client: redis.Redis
) -> None:
    """Stock kombu's entry names the exchange: routed nowhere, the restore keeps the
    message as a dead letter of the queue its routing key names, with the reason."""
    queue = app.conf.task_default_queue
    with channel_of(redis_server.url) as stock, channel_of(app) as ours:
        publish_routed_nowhere(stock, redis_client, queue)
        assert Queue(queue)(stock).get(no_ack=False) is not None
        wait_until_visible(redis_client)
        ours.qos.restore_visible(num=10, interval=1)
    assert queued(redis_client, queue) == [] and redis_client.hlen("unacked") == 0
    with open_store(app) as store:
        (letter,) = store.dead_letters("gone-key")
    assert "routes 'gone-key' to no queue" in letter.reason
    assert json.loads(letter.record.payload)["body"]
