"""Faults on RabbitMQ with real processes: a standalone mover SIGKILLed in the middle
of handing thousands of messages over (another mover finishes), and RabbitMQ restarted
under a mover (its connection dies mid-batch); nothing is lost either way."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from celery import Celery
from kombu import Queue

import celery_delayq
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.testing import wait_until
from celery_delayq.testing.rabbitmq import RabbitMQNode, RabbitMQUnavailable

from ...helpers import ready_in, schedule_overdue, standalone_mover, take_all

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

MESSAGES = 3_000


@pytest.mark.slow
@pytest.mark.promise("handover-nothing-lost", "handover-stable-id")
def test_a_mover_killed_mid_hand_over_loses_nothing_and_its_duplicates_are_attributable(
    make_amqp_app, amqp_settings, rabbitmq_url
):
    # A short lease, so the killed mover's claims come back soon; movers wait for a
    # batch's confirms at most half of it (2 s), plenty for 100 messages.
    settings = {**amqp_settings, "delayq_handover_lease": 4.0, "delayq_move_batch_size": 100}
    app = make_amqp_app(**settings)
    queue = app.conf.task_default_queue
    with app.connection_for_write() as connection:
        Queue(queue)(connection.default_channel).declare()
    schedule_overdue(app, queue, MESSAGES)

    with standalone_mover(rabbitmq_url, settings) as first:
        wait_until(lambda: ready_in(app, queue) >= MESSAGES // 10, timeout=60)
        first.kill()  # SIGKILL, mid-stream: some batches claimed, maybe published
    assert 0 < sum(b.pending for b in celery_delayq.backlog(app)) < MESSAGES

    with standalone_mover(rabbitmq_url, settings):
        wait_until(
            lambda: not any(b.pending for b in celery_delayq.backlog(app)),
            timeout=90,
            what="the second mover has handed everything over",
        )

    arrived = take_all(app, queue)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {f"t{i}" for i in range(MESSAGES)}  # nothing lost
    duplicated = [task for task, n in copies.items() if n > 1]
    assert all(copies[task] == 2 for task in duplicated)
    # at most the two batches the killed mover had in flight: in a backlog it sends batch
    # n + 1 before it acks batch n (the hand-over's pipelining)
    assert len(duplicated) <= 2 * 100
    for task in duplicated:
        stable = {m.headers[STABLE_ID_HEADER] for m in arrived if m.headers["id"] == task}
        assert len(stable) == 1  # both copies say they are the same delayed message
    assert not any(b.dead for b in celery_delayq.backlog(app))


@pytest.fixture
def private_rabbitmq() -> Iterator[RabbitMQNode]:
    """A RabbitMQ node of this test alone: it gets restarted."""
    node = RabbitMQNode()
    try:
        node.start()
    except RabbitMQUnavailable as exc:
        pytest.skip(f"no rabbitmq-server to start a node of its own: {exc}")
    yield node
    node.stop()


def all_handed_over(app: Celery) -> bool:
    return not any(b.pending for b in celery_delayq.backlog(app))


@pytest.mark.slow
@pytest.mark.promise("handover-nothing-lost", "handover-failed-publish-returns-claims")
def test_rabbitmq_restarted_under_a_mover_loses_nothing(
    app_factory, amqp_settings, private_rabbitmq
):
    """The mover's connection dies mid-batch: unconfirmed messages go back to the
    schedule, the mover backs off, reconnects once the node is back, and finishes."""
    settings = {
        **amqp_settings,
        "delayq_handover_lease": 4.0,
        "delayq_move_batch_size": 100,
        "delayq_mover_retry_max": 1.0,
    }
    app = app_factory(private_rabbitmq.url, **settings)
    queue = app.conf.task_default_queue
    with app.connection_for_write() as connection:
        Queue(queue)(connection.default_channel).declare()  # durable, as Celery's
    schedule_overdue(app, queue, MESSAGES)

    with standalone_mover(private_rabbitmq.url, settings) as mover:
        wait_until(lambda: ready_in(app, queue) >= MESSAGES // 10, timeout=60)
        private_rabbitmq.stop(keep_data=True)
        # the node went down mid-stream: the rest is still to hand over
        assert sum(b.pending for b in celery_delayq.backlog(app)) > 0
        private_rabbitmq.start()
        wait_until(
            lambda: all_handed_over(app),
            timeout=90,
            what="the mover has handed everything over after the restart",
            abort=mover.exited,
        )

    arrived = take_all(app, queue)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {f"t{i}" for i in range(MESSAGES)}  # nothing lost
    for task in (task for task, n in copies.items() if n > 1):
        stable = {m.headers[STABLE_ID_HEADER] for m in arrived if m.headers["id"] == task}
        assert len(stable) == 1  # a copy published again after the lost confirm
    assert not any(b.dead for b in celery_delayq.backlog(app))
