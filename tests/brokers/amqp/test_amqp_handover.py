"""Delayed messages of a RabbitMQ app wait in Redis and reach RabbitMQ through the
claim -> publish with confirms -> ack hand-over (real RabbitMQ, real Redis, no worker)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import kombu.exceptions
import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

import celery_delayq
from celery_delayq.brokers.amqp.envelope import ETA_HEADER, destination
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import mover_thread, open_store
from celery_delayq.config.errors import ConfigurationError
from celery_delayq.core.handover.claims import CLAIM_HEADER, ClaimPublishAck
from celery_delayq.core.store import Scheduled
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import wait_until

from ...helpers import NOWHERE, killed_mid_handover, take_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def overdue(app: Celery, *results: Any) -> None:
    """Make these delayed tasks due now (by the store's clock), without racing a clock."""
    for result in results:
        assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1


@pytest.mark.promise("eta-tasks-wait-in-redis", "eta-header-renamed")
def test_a_delayed_task_waits_in_redis_and_reaches_its_queue_once_when_due(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_amqp_app()
    queue = app.conf.task_default_queue
    sent = app.send_task("tests.remember", ("x",), countdown=3600, priority=3)
    assert take_all(app, queue) == []  # declared by the publish, and empty
    assert [(b.queue, b.pending) for b in celery_delayq.backlog(app)] == [(queue, 1)]

    overdue(app, sent)
    assert deliver_all_due(app) == 1
    assert deliver_all_due(app) == 0

    (message,) = take_all(app, queue)
    assert message.headers["id"] == sent.id
    assert message.headers[STABLE_ID_HEADER].startswith(f"{sent.id}@")
    assert message.properties["priority"] == 3
    assert message.properties["delivery_mode"] == 2  # persistent, as Celery published it
    # Due now: an ordinary task to the worker (no eta header: no prefetch round trips),
    # its ETA kept aside.
    assert "eta" not in message.headers and message.headers[ETA_HEADER]
    assert celery_delayq.backlog(app)[0].pending == 0
    assert redis_client.keys("*inflight*") == [] and redis_client.keys("*claims*") == []


@pytest.mark.promise("eta-header-renamed")
def test_a_due_message_keeps_its_properties_headers_and_a_body_over_frame_max(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """The hand-over writes the publish frames itself (frames.py): what RabbitMQ
    delivers is what the producer published, a body of several frames included."""
    app = make_amqp_app(delayq_max_message_size=0)  # a body over frame_max, above the limit
    big = "x" * 300_000  # over RabbitMQ's frame_max of 128 KiB
    extra = {
        "nested": {"list": [1, "two", None, True, 1.5], "big": 2**40},
        "flag": False,
        "text": "\u00e9",
        "when": datetime(2030, 1, 2, 3, 4, 5),  # not JSON: encoded by py-amqp
    }
    sent = app.send_task("tests.remember", (big,), countdown=3600, priority=5, headers=extra)
    overdue(app, sent)
    assert deliver_all_due(app) == 1

    (message,) = take_all(app, app.conf.task_default_queue)
    assert {name: message.headers[name] for name in extra} == extra
    assert message.headers["id"] == sent.id and message.headers[ETA_HEADER]
    assert json.loads(message.body)[0] == [big]
    assert message.properties["priority"] == 5
    assert message.properties["correlation_id"] == sent.id
    assert message.properties["content_type"] == "application/json"
    assert message.properties["content_encoding"] == "utf-8"


@pytest.mark.promise("movers-publish-with-confirms", "handover-refused-dead-lettered")
def test_a_message_nobody_can_route_is_retried_then_dead_lettered_with_the_reason(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """An exchange with no binding for the routing key: RabbitMQ returns the mandatory
    message. It is tried again after a back-off, then kept as a dead letter, never
    dropped; a routable message of the same batch is delivered."""
    app = make_amqp_app(delayq_handover_tries=2, delayq_handover_backoff=0.001)
    lonely = Exchange("lonely", type="direct")
    with app.connection_for_write() as connection:
        lonely(connection.default_channel).declare()
    unroutable = app.send_task(
        "tests.remember", countdown=3600, exchange="lonely", routing_key="none"
    )
    routable = app.send_task("tests.remember", countdown=3600)
    overdue(app, unroutable, routable)

    assert deliver_all_due(app) == 1  # routable; the other is refused once
    with open_store(app) as store:
        wait_until_dead = [store.move_all_due() for _ in range(3)]  # its back-off is 1-2 ms
    assert sum(r.moved for r in wait_until_dead) == 0

    keys = redis_client.keys("*:dead:why")
    assert len(keys) == 1
    (why,) = redis_client.hvals(keys[0])
    _, tries, reason = why.decode().split(" ", 2)
    assert tries == "2"
    assert reason.startswith("unroutable: ") and "'lonely'" in reason and "'none'" in reason
    assert len(take_all(app, app.conf.task_default_queue)) == 1


@pytest.mark.promise("handover-refused-dead-lettered", "handover-refusal-stops-one")
def test_an_exchange_that_does_not_exist_refuses_only_its_own_messages(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A message to a missing exchange is refused by its look-up, before anything is
    published to it (a publish would close the channel); the others arrive."""
    app = make_amqp_app(delayq_handover_tries=1)
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    bad = app.send_task("tests.remember", countdown=3600, exchange="nowhere", routing_key="x")
    overdue(app, good[0], bad, *good[1:])

    assert deliver_all_due(app) == 3

    delivered = [m.headers["id"] for m in take_all(app, app.conf.task_default_queue)]
    assert sorted(delivered) == sorted(r.id for r in good)
    (why,) = redis_client.hvals(redis_client.keys("*:dead:why")[0])
    assert "NOT_FOUND" in why.decode() and "nowhere" in why.decode()


@pytest.mark.promise("handover-failed-publish-returns-claims")
def test_an_unreachable_broker_returns_the_claims_and_loses_nothing(
    make_amqp_app: Callable[..., Celery],
    app_factory: Callable[..., Celery],
    amqp_settings: dict[str, Any],
    redis_client: redis.Redis,
) -> None:
    app = make_amqp_app()
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(5)]
    overdue(app, *sent)
    down = app_factory("amqp://guest:guest@127.0.0.1:9//", **amqp_settings)

    with open_store(down) as store, pytest.raises(OSError):
        store.move_all_due()

    assert redis_client.keys("*inflight*") == []
    assert celery_delayq.backlog(app)[0].overdue == 5
    app.set_current()
    assert deliver_all_due(app) == 5
    assert len(take_all(app, app.conf.task_default_queue)) == 5


@pytest.mark.promise("handover-expired-lease-republished")
def test_a_claim_whose_mover_died_comes_back_after_its_lease(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A mover that claimed and died before publishing: once the lease is over, the next
    pass publishes the message; nothing is lost. (The dead mover's lease is 200 ms; the
    live one keeps the default; so does its hold on the queue as its claimer.)"""
    app = make_amqp_app()
    sent = app.send_task("tests.remember", countdown=3600)
    overdue(app, sent)
    with open_store(app) as store:
        handover = store.handover
        assert isinstance(handover, ClaimPublishAck)
        queue = store.keys.for_queue(app.conf.task_default_queue)
        claimed = handover.scripts.claim_due(
            keys=queue.handover_keys(),
            args=[*queue.page_args(), 10, 1 << 20, "pass-1", 200, 5, "dead-mover", 200, 0],
        )
        assert len(claimed) == CLAIM_HEADER + 2  # the numbers, then one key and its record
        assert store.move_all_due().moved == 0  # claimed: no other mover takes it

        claimed_at = int(claimed[0])  # the claim's server time: its lease ends 200 ms on
        result = wait_for_move(store)
        assert result.now_ms - handover.ahead_ms >= claimed_at + 200

    (message,) = take_all(app, app.conf.task_default_queue)
    assert message.headers["id"] == sent.id


def test_one_mover_at_a_time_claims_from_a_queue_shard(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """While one mover hands a shard's messages over, another leaves that shard alone
    (and is told when to look again), so the shard's messages go out in due order; the
    holder's next pass goes on; once the holder stops claiming, another takes over."""
    app = make_amqp_app(delayq_move_batch_size=2)
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(5)]
    overdue(app, *sent)
    with open_store(app) as first, open_store(app) as second:
        assert isinstance(first.handover, ClaimPublishAck)
        assert isinstance(second.handover, ClaimPublishAck)
        second.handover.claimer = "another mover"
        queue = app.conf.task_default_queue
        held = first.move_due(queue)  # claims, publishes, acks 2; holds the shard

        skipped = second.move_due(queue)
        assert (held.moved, skipped.moved) == (2, 0)
        assert skipped.next_due_ms is not None and skipped.next_due_ms > skipped.now_ms
        assert first.move_due(queue).moved == 2  # the holder goes on
        taken = wait_until(lambda: (r := second.move_due(queue)).moved and r, timeout=10)
        assert taken.now_ms >= skipped.now_ms + 1  # only once the hold had ended
    ids = [m.headers["id"] for m in take_all(app, queue)]
    assert sorted(ids) == sorted(r.id for r in sent)


def wait_for_move(store: Any) -> Any:
    return wait_until(lambda: (r := store.move_all_due()).moved and r, what="a pass moved it")


@pytest.mark.promise("quorum-queues-skip-native-delayed-delivery")
def test_a_quorum_queue_on_a_topic_exchange_keeps_celerys_native_delayed_delivery_out(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """Celery 5.5+ reroutes an ETA message to ``celery_delayed_27`` when it sees quorum
    queues and a topic exchange; with celery-delayq it waits in Redis, cancellable, and
    goes to its own exchange."""
    name = f"quorum-{make_amqp_app().conf.task_default_queue}"
    queue = Queue(
        name,
        Exchange(name, type="topic"),
        routing_key=name,
        queue_arguments={"x-queue-type": "quorum"},
    )
    app = make_amqp_app(
        task_queues=[queue],
        task_default_queue=name,
        broker_transport_options={"confirm_publish": True},
    )
    later = app.send_task("tests.remember", countdown=3600)
    soon = app.send_task("tests.remember", countdown=3600)

    assert {b.queue: b.pending for b in celery_delayq.backlog(app)} == {name: 2}
    assert celery_delayq.cancel(app, later.id) == 1
    overdue(app, soon)
    assert deliver_all_due(app) == 1
    (message,) = take_all(app, name)
    assert message.headers["id"] == soon.id
    assert message.delivery_info["exchange"] == name


@pytest.mark.promise("store-url-required")
def test_a_broker_that_is_not_redis_needs_a_store_url(
    app_factory: Callable[..., Celery], rabbitmq_url: str
) -> None:
    """At start (worker, beat, standalone mover) and at the first publish."""
    app = app_factory(rabbitmq_url, broker_transport="celery_delayq.transport:AMQPTransport")
    with pytest.raises(ConfigurationError, match="delayq_store_url"):
        mover_thread(app, "mover")
    with pytest.raises(ConfigurationError, match="delayq_store_url"):
        app.send_task("tests.remember", countdown=60)


def test_a_store_url_must_be_a_redis_url(app_factory: Callable[..., Celery]) -> None:
    app = app_factory(NOWHERE, delayq_store_url="amqp://elsewhere//")
    with pytest.raises(ConfigurationError, match="delayq_store_url must be a redis"):
        celery_delayq.backlog(app)


@pytest.mark.promise("store-down-publish-fails-clean")
def test_an_unreachable_store_fails_the_publish_like_a_broker_outage(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """Redis down when a delayed task is sent: kombu's OperationalError after Celery's
    publish retries, and nothing reaches RabbitMQ."""
    app = make_amqp_app(delayq_store_url="redis://127.0.0.1:9/0")
    policy = {"max_retries": 1, "interval_start": 0, "interval_step": 0.01}

    with pytest.raises(kombu.exceptions.OperationalError, match="delayq_store_url"):
        app.send_task("tests.remember", countdown=60, retry_policy=policy)

    assert take_all(app, app.conf.task_default_queue) == []


@pytest.mark.parametrize("killed_after", ["claim", "publish", "ack"])
@pytest.mark.promise(
    "handover-nothing-lost", "handover-expired-lease-republished", "handover-stable-id"
)
def test_a_mover_killed_at_any_step_loses_nothing_and_duplicates_only_after_the_confirm(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis, killed_after: str
) -> None:
    """The state a SIGKILL leaves at each step of claim -> publish -> ack, then another
    mover's passes once the dead mover's lease is over: every message arrives; only a
    kill between the broker's confirm and the ack gives a second copy, with the same
    stable id."""
    app = make_amqp_app()
    queue_name = app.conf.task_default_queue
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    overdue(app, *sent)
    killed_mid_handover(app, queue_name, killed_after, count=3)

    arrived = take_all(app, queue_name)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {r.id for r in sent}  # nothing lost
    expected = 2 if killed_after == "publish" else 1
    assert set(copies.values()) == {expected}
    ids = {m.headers["id"]: set() for m in arrived}
    for message in arrived:
        ids[message.headers["id"]].add(message.headers[STABLE_ID_HEADER])
    assert all(len(stable) == 1 for stable in ids.values())  # copies share their stable id
    assert redis_client.keys("*inflight*") == [] and redis_client.keys("*dead*") == []


class Recording:
    """The store's real AMQP publisher, with the order of its sends and settles noted."""

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher
        self.pipelines = publisher.pipelines
        self.calls: list[str] = []

    def send(self, messages: Any) -> Any:
        self.calls.append("send")
        return self.publisher.send(messages)

    def settle(self, sent: Any) -> Any:
        self.calls.append("settle")
        return self.publisher.settle(sent)

    def close(self) -> None:
        self.publisher.close()


def recorded(store: Any) -> Recording:
    handover = store.handover
    assert isinstance(handover, ClaimPublishAck)
    recording = Recording(handover.publisher)
    handover._publisher = recording
    return recording


@pytest.mark.promise("handover-settles-every-batch")
def test_a_backlog_goes_out_with_each_next_batch_sent_before_the_last_is_confirmed(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """In a backlog a mover's pass sends batch n + 1 before it waits for batch n's
    confirms (the broker, Redis and the mover work at once); every message arrives
    once and no claim is left when the pass returns."""
    app = make_amqp_app(delayq_move_batch_size=2, delayq_move_call_budget=0)
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(7)]
    overdue(app, *sent)
    with open_store(app) as store:
        recording = recorded(store)
        assert store.move_all_due().moved == 7
        assert redis_client.keys("*inflight*") == []
    # 4 batches (2, 2, 2, 1): each next one sent before the one before is settled
    assert recording.calls == ["send", "send", "settle", "send", "settle", "send", "settle"] + [
        "settle"
    ]
    ids = Counter(m.headers["id"] for m in take_all(app, app.conf.task_default_queue))
    assert ids == Counter(r.id for r in sent)


@pytest.mark.promise("handover-settles-every-batch")
def test_one_batch_asked_for_is_one_batch_sent_and_nothing_stays_in_flight(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """``move_due`` (and promote) deliver one batch and return with it acked: nothing
    is sent ahead, whose claim could outlive its lease in a store kept open."""
    app = make_amqp_app(delayq_move_batch_size=2, delayq_move_call_budget=0)
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(5)]
    overdue(app, *sent)
    with open_store(app) as store:
        recording = recorded(store)
        assert store.move_due(app.conf.task_default_queue).moved == 2
        assert recording.calls == ["send", "settle"]
        assert redis_client.keys("*inflight*") == []
        assert celery_delayq.backlog(app)[0].overdue == 3


@pytest.mark.promise("handover-settles-every-batch")
def test_closing_a_store_settles_its_pipelined_batch(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A mover stopped with a batch sent ahead (its pass cut short) waits for that
    batch's confirms and acks it: no claim is left to expire and be published twice."""
    app = make_amqp_app(delayq_move_batch_size=2, delayq_move_call_budget=0)
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(4)]
    overdue(app, *sent)
    with open_store(app) as store:
        queue = store.keys.for_queue(app.conf.task_default_queue)
        assert store.handover.deliver_due(queue, 2, more_calls=True).moved == 2
        assert len(redis_client.keys("*inflight*")) == 1  # the batch sent ahead
    assert redis_client.keys("*inflight*") == []
    assert celery_delayq.backlog(app)[0].pending == 0
    ids = Counter(m.headers["id"] for m in take_all(app, app.conf.task_default_queue))
    assert ids == Counter(r.id for r in sent)


@pytest.mark.promise("handover-refused-dead-lettered")
def test_a_message_that_closes_the_channel_loses_nothing_of_the_batch_sent_after_it(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A message to a missing exchange, in a queue of its own, between batches sent
    ahead: published, it would close the channel under the batches not yet confirmed
    (RabbitMQ sends no confirm once it is closed: they would arrive twice). Its exchange
    is looked up first: every good message arrives once, the bad one is refused."""
    app = make_amqp_app(
        delayq_handover_tries=1, delayq_move_batch_size=2, delayq_move_call_budget=0
    )
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(5)]
    bad = app.send_task("tests.remember", countdown=3600, exchange="nowhere", routing_key="x")
    overdue(app, bad, *good)  # the bad one in the first batch

    with open_store(app) as store:
        recording = recorded(store)
        assert store.move_all_due().moved == 5
    assert recording.calls.count("send") >= 3
    ids = Counter(m.headers["id"] for m in take_all(app, app.conf.task_default_queue))
    assert ids == Counter(r.id for r in good)
    (why,) = redis_client.hvals(redis_client.keys("*:dead:why")[0])
    assert "NOT_FOUND" in why.decode()
    assert redis_client.keys("*inflight*") == []


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        b'{"body": 5}',
        b'{"headers": {}}',
        b'{"body": "", "properties": 7}',
    ],
)
@pytest.mark.promise("crafted-input-stops-nothing", "handover-refused-dead-lettered")
def test_a_crafted_envelope_is_refused_alone_and_dead_lettered_with_the_reason(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis, payload: bytes
) -> None:
    """A stored message that is no kombu envelope (written by hand into Redis) cannot
    become an AMQP publish: it is refused with the reason, and the messages around it
    are delivered; nothing stops the queue."""
    app = make_amqp_app(delayq_handover_tries=1)
    queue = app.conf.task_default_queue
    before = app.send_task("tests.remember", (1,), countdown=3600)
    after = app.send_task("tests.remember", (2,), countdown=3600)
    overdue(app, before, after)
    with open_store(app) as store:
        due = store.server_time_ms() - 1
        store.schedule_many(
            [Scheduled(queue, "crafted", "crafted", due, destination("", queue), payload)]
        )
        assert store.move_all_due().moved == 2
    ids = sorted(m.headers["id"] for m in take_all(app, queue))
    assert ids == sorted([before.id, after.id])
    (why,) = redis_client.hvals(redis_client.keys("*:dead:why")[0])
    assert "unreadable message" in why.decode()
    assert redis_client.keys("*inflight*") == []


def due_in_order(app: Celery, *results: Any) -> None:
    """Make these delayed tasks due, one second apart in this order (by the store's clock):
    the hand-over claims and publishes them in this order."""
    with open_store(app) as store:
        now_ms = store.server_time_ms()
    for position, result in enumerate(results):
        due_ms = now_ms - 1000 * (len(results) - position)
        eta = datetime.fromtimestamp(due_ms / 1000, timezone.utc)
        assert celery_delayq.reschedule(app, result.id, eta=eta) == 1


@pytest.mark.promise("handover-refused-dead-lettered")
def test_messages_published_before_one_to_a_missing_exchange_arrive_once(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """Good messages, then one to an exchange that does not exist, then another good one,
    in one batch: RabbitMQ routes the messages published before a publish that closes the
    channel and sends no confirm for them once it is closed. The missing exchange is
    found before anything is published to it, so the channel stays open: each good
    message arrives once, the bad one is refused."""
    app = make_amqp_app(delayq_handover_tries=1)
    queue = app.conf.task_default_queue
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    bad = app.send_task("tests.remember", countdown=3600, exchange="nowhere", routing_key=queue)
    due_in_order(app, good[0], good[1], bad, good[2])

    assert deliver_all_due(app) == 3

    ids = Counter(m.headers["id"] for m in take_all(app, queue))
    assert ids == Counter(r.id for r in good)
    (why,) = redis_client.hvals(redis_client.keys("*:dead:why")[0])
    assert "NOT_FOUND" in why.decode() and "nowhere" in why.decode()
    assert redis_client.keys("*inflight*") == []


@pytest.mark.promise("handover-channel-closed-republishes", "handover-stable-id")
def test_an_exchange_deleted_after_its_look_up_duplicates_only_what_went_before_it(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """An exchange looked up (a message went through it), then deleted: the next publish
    to it closes the channel. The messages published before it may arrive twice (RabbitMQ
    routed them, then sent no confirm), with one stable id; the one after it arrives
    once; the culprit is refused; nothing is lost."""
    app = make_amqp_app(delayq_handover_tries=1)
    queue = app.conf.task_default_queue
    gone = f"gone-{queue}"
    first = app.send_task("tests.remember", countdown=3600, exchange=gone, routing_key=queue)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        Exchange(gone, type="direct")(channel).declare()
        channel.queue_bind(queue, gone, routing_key=queue)
    overdue(app, first)
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    culprit = app.send_task("tests.remember", countdown=3600, exchange=gone, routing_key=queue)
    due_later = [good[0], good[1], culprit, good[2]]

    with open_store(app) as store:
        assert store.move_all_due().moved == 1  # through the exchange: it was looked up
        with app.connection_for_write() as connection:
            connection.default_channel.exchange_delete(gone)
        due_in_order(app, *due_later)
        assert store.move_all_due().moved == 3

    arrived = take_all(app, queue)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {first.id, *(r.id for r in good)}  # nothing lost
    assert copies[first.id] == copies[good[2].id] == 1
    assert {copies[good[0].id], copies[good[1].id]} <= {1, 2}
    stable = {(m.headers["id"], m.headers[STABLE_ID_HEADER]) for m in arrived}
    assert len(stable) == len(copies)  # a copy has its original's stable id
    (why,) = redis_client.hvals(redis_client.keys("*:dead:why")[0])
    assert "NOT_FOUND" in why.decode() and gone in why.decode()
    assert redis_client.keys("*inflight*") == []
