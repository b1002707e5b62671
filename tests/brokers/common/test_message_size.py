"""``delayq_max_message_size``: a message bigger than the limit is refused at publish,
with nothing stored, on every path that stores one; a move call carries a bounded number
of bytes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import kombu.pools
import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq import ConfigurationError, DelayqConfig, periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.config.errors import MessageTooLarge
from celery_delayq.core.handover import MOVE_BATCH_BYTES
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.ops.rescue import rescue

from ...helpers import noop_task, remember
from ...vanilla import apps, in_store

pytestmark = pytest.mark.integration

LIMIT = 4096
BIG = "x" * (2 * LIMIT)  # an argument that makes any task message bigger than LIMIT


def stored_keys(client: redis.Redis) -> set[bytes]:
    """Every key but kombu's bindings (a publish declares its queue's)."""
    return {key for key in client.keys("*") if not key.startswith(b"_kombu.binding")}


def pending(app: Celery) -> int:
    return sum(each.pending for each in celery_delayq.backlog(app))


@pytest.fixture
def small(make_app) -> Celery:
    return make_app(delayq_max_message_size=LIMIT)


@pytest.mark.promise("max-message-size-refused", "max-message-size-immediate")
@pytest.mark.parametrize(
    "options",
    [{"countdown": 60}, {"eta": datetime.now(timezone.utc) + timedelta(hours=1)}, {}],
    ids=["countdown", "eta", "immediate"],
)
def test_a_message_over_the_limit_is_refused_naming_its_size_and_nothing_is_stored(
    small, redis_client, options
):
    with pytest.raises(MessageTooLarge) as refused:
        noop_task(small).apply_async((BIG,), task_id="too-big", **options)

    error = refused.value
    assert error.size > LIMIT and error.limit == LIMIT and error.queue == "default"
    assert f"{error.size:,} bytes" in str(error) and f"({LIMIT:,} bytes)" in str(error)
    assert "delayq_max_message_size" in str(error) and "too-big" in str(error)
    assert isinstance(error, ValueError)  # as an unreadable eta: the caller's mistake
    assert stored_keys(redis_client) == set()
    assert pending(small) == 0


def fresh_app(make_app, limit: int) -> Celery:
    """An app whose channels are new (kombu's pools are per broker URL: a channel keeps
    the settings of the app that opened it)."""
    kombu.pools.reset()
    return make_app(delayq_max_message_size=limit)


@pytest.mark.promise("max-message-size-refused")
@pytest.mark.parametrize("options", [{"countdown": 60}, {}], ids=["kept", "immediate"])
def test_the_limit_is_on_the_envelope_as_stored_exactly(make_app, redis_client, options):
    """A message of exactly the limit goes; one byte more is refused."""
    send = {"task_id": "probe", **options}
    noop_task(fresh_app(make_app, 0)).apply_async(("x" * 1000,), task_id="probe", countdown=60)
    with open_store(make_app()) as store:
        size = len(store.pending(queue="default", limit=1)[0].record.payload)
        store.purge("default")
    if not options:  # the same message without its eta header
        noop_task(fresh_app(make_app, 0)).apply_async(("x" * 1000,), **send)
        size = len(redis_client.rpop("default"))

    noop_task(fresh_app(make_app, size)).apply_async(("x" * 1000,), **send)
    assert pending(make_app()) + redis_client.llen("default") == 1

    with pytest.raises(MessageTooLarge, match=f"message of {size:,} bytes"):
        noop_task(fresh_app(make_app, size - 1)).apply_async(("x" * 1000,), **send)
    assert pending(make_app()) + redis_client.llen("default") == 1


@pytest.mark.promise("max-message-size-off")
def test_zero_lifts_the_limit(make_app, redis_client):
    app = make_app(delayq_max_message_size=0)
    noop_task(app).apply_async(("x" * 300_000,), countdown=60)
    noop_task(app).apply_async(("x" * 300_000,))
    assert pending(app) == 1 and redis_client.llen("default") == 1


def test_the_default_refuses_a_message_over_64_kib(app, redis_client):
    with pytest.raises(MessageTooLarge, match=r"\(65,536 bytes\)"):
        noop_task(app).apply_async(("x" * 70_000,), countdown=60)
    noop_task(app).apply_async(("x" * 40_000,), countdown=60)
    assert pending(app) == 1


@pytest.mark.promise("max-message-size-immediate")
def test_without_reliable_consume_an_immediate_message_is_not_bounded(make_app, redis_client):
    """kombu's own consume (BRPOP) copies a message without a script: only kept ones are
    bounded then."""
    app = make_app(delayq_max_message_size=LIMIT, delayq_reliable_consume=False)
    noop_task(app).apply_async((BIG,))
    assert redis_client.llen("default") == 1
    with pytest.raises(MessageTooLarge):
        noop_task(app).apply_async((BIG,), countdown=60)
    assert pending(app) == 0


@pytest.mark.parametrize("value", [-1, 1.5, "64k", True, 512 * 1024 * 1024 + 1])
def test_a_bad_limit_is_refused(value):
    with pytest.raises(ConfigurationError, match="delayq_max_message_size must be an integer"):
        DelayqConfig(max_message_size=value)


@pytest.mark.promise("max-message-size-refused")
def test_a_keyed_message_over_the_limit_is_refused_and_holds_no_key(small, redis_client):
    task = noop_task(small)
    with pytest.raises(MessageTooLarge):
        celery_delayq.schedule_keyed(task, (BIG,), key="k", countdown=60)
    assert stored_keys(redis_client) == set()
    kept = celery_delayq.schedule_keyed(task, ("small",), key="k", countdown=60)
    assert not kept.dropped and pending(small) == 1


@pytest.mark.promise("max-message-size-refused")
def test_bulk_scheduling_refuses_the_call_over_the_limit_and_stores_the_calls_before_it(
    small, redis_client
):
    """The calls after the first are copies of its message (bulk.py's templates), not
    Celery's own path: they are refused all the same."""
    task = noop_task(small)
    calls = [((f"small {i}",), {}, {"countdown": 60, "task_id": f"t{i}"}) for i in range(5)]
    calls.append(((BIG,), {}, {"countdown": 60, "task_id": "big"}))
    calls.append((("after",), {}, {"countdown": 60, "task_id": "after"}))
    with pytest.raises(MessageTooLarge, match="task big"):
        celery_delayq.schedule_many(task, calls)
    with open_store(small) as store:
        listed = store.pending(queue="default", limit=100)
    assert sorted(m.task_id for m in listed) == [f"t{i}" for i in range(5)]


@pytest.mark.promise("max-message-size-periodic")
def test_a_periodic_entry_whose_message_is_too_big_is_refused_at_upsert(small, redis_client):
    now = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    task = noop_task(small)
    with pytest.raises(ValueError, match="periodic entry 'big' refused: .*delayq_max_message"):
        periodic.upsert(small, "big", task.name, 60, args=(BIG,), now=now)
    assert periodic.entries(small) == [] and pending(small) == 0
    periodic.upsert(small, "fits", task.name, 60, args=("small",), now=now)
    assert pending(small) == 5  # the 5-minute horizon written ahead


@pytest.mark.promise("max-message-size-refused", "max-message-size-immediate")
@pytest.mark.parametrize("broker", ["amqp", "sqs"])
def test_on_rabbitmq_and_sqs_a_kept_message_over_the_limit_is_refused(
    request, redis_client, broker
):
    """RabbitMQ and SQS hold a message published at once themselves: only kept ones are
    bounded."""
    make = request.getfixturevalue(f"make_{broker}_app")
    app = make(delayq_max_message_size=LIMIT)
    with pytest.raises(MessageTooLarge):
        noop_task(app).apply_async((BIG,), countdown=60)
    assert stored_keys(redis_client) == set()
    noop_task(app).apply_async((BIG,))  # published to the broker, not refused
    assert stored_keys(redis_client) == set()


@pytest.mark.promise("move-call-bytes-bounded")
def test_a_move_call_carries_at_most_the_byte_budget_plus_one_message(redis_client):
    """Messages of up to the largest default size are moved a few at a time, however many
    the batch size allows: each call stops once it carries MOVE_BATCH_BYTES."""
    store = DelayedStore(redis_client, KeySpace(), 500, move_call_budget=0)
    payload = b"x" * (64 * 1024 - 100)
    now = int(redis_client.time()[0] * 1000) - 1
    count = 3 * MOVE_BATCH_BYTES // len(payload) + 5
    store.schedule_many(Scheduled("q", f"m{i}", f"t{i}", now, "q", payload) for i in range(count))
    shard = store.keys.shards_of("q")[0]
    calls = []
    while moved := store.handover.deliver_due(shard, 500).moved:
        calls.append(moved)
    assert sum(calls) == count and redis_client.llen("q") == count
    most = -(-MOVE_BATCH_BYTES // len(payload))  # the call that reaches the budget stops
    assert max(calls) == most and len(calls) >= 3


@pytest.mark.promise("max-message-size-rescue")
def test_rescue_leaves_a_vanilla_eta_message_over_the_limit_where_it_is(make_app, redis_client):
    vanilla, app = apps(make_app, delayq_max_message_size=LIMIT)
    big = remember(vanilla, BIG, countdown=60)
    small_one = remember(vanilla, "small", countdown=60)
    before = redis_client.lrange("default", 0, -1)

    report = rescue(app)

    assert (report.rescued_from_lists, report.errors) == (1, 1)
    assert "delayq_max_message_size" in report.error_samples[0]
    assert set(in_store(app)) == {small_one.id}
    assert redis_client.lrange("default", 0, -1) == [r for r in before if big.id.encode() in r]
