"""A live reshard under load: the slot of a busy queue moves to another master while a
producer schedules and a mover hands messages over to RabbitMQ. redis-py follows MOVED
and ASK; every message reaches the queue exactly once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import amqp
import pytest
from kombu import Queue

import celery_delayq
from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store import Scheduled
from celery_delayq.testing import wait_until
from celery_delayq.testing.redis_cluster import RedisClusterServers, slot_of

from ..helpers import ready_in, standalone_mover, take_all

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

MESSAGES = 3_000


@pytest.fixture
def cluster() -> Iterator[RedisClusterServers]:
    """3 masters of this test alone (a slot changes hands)."""
    with RedisClusterServers(masters=3) as servers:
        yield servers


class Producer(threading.Thread):
    """Schedules ``MESSAGES`` messages, each due a few ms ahead, as fast as it can."""

    def __init__(self, store, queue: str) -> None:
        super().__init__(daemon=True)
        self.store, self.queue = store, queue
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for i in range(MESSAGES):
                due = self.store.server_time_ms() + i % 50
                message = amqp.Message(b"{}", application_headers={"id": f"t{i}"})
                self.store.schedule(
                    Scheduled(
                        self.queue,
                        f"m{i}",
                        f"t{i}",
                        due,
                        destination("", self.queue),
                        envelope(message),
                    )
                )
                self.sent = i + 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_a_queue_slot_moved_to_another_master_under_load_delivers_each_message_once(
    make_amqp_app, amqp_settings, rabbitmq_url, cluster
):
    store_url = cluster.url.replace("redis://", "redis+cluster://")
    settings = {**amqp_settings, "delayq_store_url": store_url, "delayq_move_batch_size": 100}
    app = make_amqp_app(**settings)
    queue = app.conf.task_default_queue
    with app.connection_for_write() as connection:
        Queue(queue)(connection.default_channel).declare()

    with open_store(app) as store, standalone_mover(rabbitmq_url, settings) as mover:
        slot = slot_of(store.keys.for_queue(queue).messages)
        source = cluster.node_for_slot(slot)
        target = next(m for m in cluster.masters() if m is not source)
        producer = Producer(store, queue)
        producer.start()
        wait_until(lambda: ready_in(app, queue) >= MESSAGES // 10, timeout=60)

        migration = cluster.begin_slot_migration(slot, target)
        moved_keys = migration.move_keys(batch=100_000)  # the whole slot in one MIGRATE
        migration.finish()
        during = producer.sent
        producer.join(timeout=60)
        assert producer.error is None, producer.error
        wait_until(
            lambda: not any(b.pending or b.in_flight for b in celery_delayq.backlog(app)),
            timeout=60,
            what="everything handed over",
            abort=mover.exited,
        )

    assert moved_keys > 0 and cluster.node_for_slot(slot) is target
    assert during < MESSAGES  # the producer was still at work when the slot moved
    copies = Counter(m.headers["id"] for m in take_all(app, queue))
    assert set(copies) == {f"t{i}" for i in range(MESSAGES)}  # nothing lost
    assert set(copies.values()) == {1}  # nothing twice
