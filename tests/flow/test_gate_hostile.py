"""Flow control against crafted keys and values, through the real move (lua/move_due.lua
with lua/gates.lua) on a real Redis: a crafted bucket may lose its limits, but no move
call fails (a failed call would hold every message of the queue, the unlimited ones
too), no message is lost, and no call does unbounded work."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from celery_delayq.core.handover import MOVE_BATCH_BYTES
from celery_delayq.core.handover.claims import ClaimPublishAck
from celery_delayq.core.handover.same_redis import SameRedisMove
from celery_delayq.core.layout.gates import (
    MOST_INTERVAL_US,
    GateSpec,
    InvalidLimit,
    Rate,
    gate_field,
)
from celery_delayq.core.layout.keys import KeySpace, QueueKeys
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing.waiting import wait_until
from tests.core.store.test_store_adversarial import ConfirmingPublisher
from tests.flow.harness import gate_of

pytestmark = pytest.mark.adversarial

BUCKET = "t"
LIMITED = gate_of(("10/s",), task=BUCKET)


def make_store(client: redis.Redis, log: int = 10) -> DelayedStore:
    return DelayedStore(client, KeySpace(), 500, handover=SameRedisMove(client, release_log=log))


def due_message(store: DelayedStore, name: str, gate: bytes | None, ago_ms: int = 1) -> Scheduled:
    now = store.server_time_ms()
    payload = b'{"n": "%s"}' % name.encode()
    message = Scheduled("q", name, name, now - ago_ms, "q", payload, gate=gate)
    store.schedule(message)
    return message


def waiting(client: redis.Redis, keys: QueueKeys, bucket: str | bytes) -> list[bytes]:
    if isinstance(bucket, str):
        bucket = bucket.encode("utf-8", "surrogatepass")
    key = f"{keys.gates}w:".encode() + bucket
    if client.type(key) != b"list":
        return []
    return client.lrange(key, 0, -1)


def delivered(client: redis.Redis, name: str) -> bool:
    return any(b'"%s"}' % name.encode() in payload for payload in client.lrange("q", 0, -1))


def check_nothing_lost(client: redis.Redis, keys: QueueKeys, sent: list[Scheduled]) -> None:
    """Each message is delivered, or still held: its record in MSG, in its bucket or in
    the schedule."""
    scheduled = {key for page in client.zrange(keys.pages, 0, -1) for key in
                 client.zrange(keys.page(page), 0, -1)}  # fmt: skip
    for message in sent:
        if delivered(client, message.message_id):
            continue
        assert client.hexists(keys.messages, message.key), f"{message.message_id} lost"
        bucket = (message.gate or b" ").partition(b" ")[2]
        held = message.key in scheduled or message.key in waiting(client, keys, bucket)
        assert held, f"{message.message_id}: its record stays, but nothing will move it"


def state(**fields: object) -> Callable[[redis.Redis, QueueKeys], object]:
    """Craft these fields of the bucket's state."""
    return lambda client, keys: client.hset(keys.gate("s", BUCKET), mapping=fields)


CRAFTED: dict[str, Callable[[redis.Redis, QueueKeys], object]] = {
    "state is a string": lambda c, k: c.set(k.gate("s", BUCKET), "x"),
    "waiting list is a string": lambda c, k: c.set(k.gate("w", BUCKET), "x"),
    "waiting list is a hash": lambda c, k: c.hset(k.gate("w", BUCKET), "a", "b"),
    "log is a string": lambda c, k: c.set(f"{k.gates}log", "x"),
    "t1 nan": state(spec="r103093/3092", t1="nan"),
    "t1 inf": state(spec="r103093/3092", t1="inf"),
    "t1 -inf": state(spec="r103093/3092", t1="-inf"),
    "t1 -1": state(spec="r103093/3092", t1="-1"),
    "t1 huge": state(spec="r103093/3092", t1="1e300"),
    "t1 long digits": state(t1="9" * 400),
    "hold nan": state(hold="nan"),
    "hold huge": state(hold="1e300"),
    "hold -inf": state(hold="-inf"),
    "hold garbage": state(hold="soon"),
    "released garbage": state(released="many"),
    "released at its most": state(released=2**63 - 1),
    "index is a string": lambda c, k: c.set(k.gate_index, "x"),
    "released counts are a string": lambda c, k: c.set(k.gate_released, "x"),
    "released count garbage": lambda c, k: c.hset(k.gate_released, BUCKET, "many"),
    "released count nan": lambda c, k: c.hset(k.gate_released, BUCKET, "nan"),
    "released count at its most": lambda c, k: c.hset(k.gate_released, BUCKET, 2**63 - 1),
}


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_bucket_fails_no_move_and_loses_no_message(redis_client, craft):
    """Crafted before its message falls due, taken in the same call as an unlimited one."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    craft(redis_client, keys)
    sent = [due_message(store, "limited", LIMITED, ago_ms=2), due_message(store, "free", None)]

    store.state.handover.deliver_due(keys, 500)

    assert delivered(redis_client, "free")
    check_nothing_lost(redis_client, keys, sent)


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("crafted", ["index", "released counts"])
def test_a_crafted_index_or_released_counts_cost_only_themselves(redis_client, crafted):
    """The bucket index or the released counts holding another type: found from the
    first command's error reply, left as they are, and the bucket keeps its limit (one
    release per call at 10/s) and the other of the two its writes."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    key = keys.gate_index if crafted == "index" else keys.gate_released
    redis_client.set(key, "x")
    sent = [due_message(store, f"limited{n}", LIMITED, ago_ms=2) for n in range(2)]

    store.state.handover.deliver_due(keys, 500)

    assert delivered(redis_client, "limited0") and not delivered(redis_client, "limited1")
    assert waiting(redis_client, keys, BUCKET) == [sent[1].key]
    assert redis_client.get(key) == b"x"
    if crafted == "index":
        assert redis_client.hget(keys.gate_released, BUCKET) == b"1"
    else:
        assert redis_client.zscore(keys.gate_index, BUCKET) is not None


STATE_CRAFTS = {name: craft for name, craft in CRAFTED.items() if "waiting" not in name}


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("craft", STATE_CRAFTS.values(), ids=STATE_CRAFTS.keys())
def test_a_bucket_crafted_while_a_message_waits_in_it_loses_it_not(redis_client, craft):
    """Crafted while a message waits in the bucket (out of the schedule: a release that
    pops it and then fails would leave its record with nothing to move it)."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    sent = [due_message(store, f"limited{n}", LIMITED, ago_ms=2) for n in range(2)]
    store.state.handover.deliver_due(keys, 500)
    assert len(waiting(redis_client, keys, BUCKET)) == 1
    ready_at = redis_client.zscore(f"{keys.gates}ready", BUCKET)
    craft(redis_client, keys)
    sent.append(due_message(store, "free", None))
    wait_until(lambda: server_us(redis_client) > ready_at, what="the bucket's time")

    failures = []
    for _ in range(2):
        try:
            store.state.handover.deliver_due(keys, 500)
        except redis.ResponseError as exc:
            failures.append(exc)

    check_nothing_lost(redis_client, keys, sent)
    assert not failures
    assert delivered(redis_client, "free")


def server_us(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


def test_a_crafted_message_in_a_crafted_bucket_lets_the_others_go(redis_client):
    """A publisher's record whose bucket's keys hold other types (a task name chosen to
    meet a key written by something else)."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    redis_client.set(keys.gate("w", "x"), "not a list")
    sent = [due_message(store, "crafted", gate_of(("1/s",), task="x"), ago_ms=10)]
    sent += [due_message(store, f"free{n}", None) for n in range(3)]
    sent += [due_message(store, "limited", LIMITED)]

    store.state.handover.deliver_due(keys, 500)

    assert len(redis_client.lrange("q", 0, -1)) >= 4
    check_nothing_lost(redis_client, keys, sent)


@pytest.mark.parametrize("rate", ["0.000001/d", "0.001/d", "0." + "0" * 320 + "1/s"])
def test_a_rate_slower_than_one_a_year_is_refused(rate):
    """Its interval would be more than Redis's commands take as an integer."""
    with pytest.raises(InvalidLimit, match="slower than the slowest rate"):
        Rate.parse(rate)


def test_the_slowest_rate_is_taken():
    assert Rate.parse("1/d").interval_us() <= MOST_INTERVAL_US
    assert Rate.parse("0.003/d").interval_us() <= MOST_INTERVAL_US


CRAFTED_SPECS = {
    "huge interval": "r" + "9" * 25 + "/0",
    "huge catch-up": "r1000/" + "9" * 25,
    "huge lease": "c1/" + "9" * 25,
    "thousands of tokens": ",".join(["r1000000/1"] * 20_000),
    "bad tokens": "r-1/1,r1e9/1,rx/y,c/,r,,,c1.5/2, r5/5,\x00",
    "empty": "",
}


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("spec", CRAFTED_SPECS.values(), ids=CRAFTED_SPECS.keys())
def test_a_crafted_spec_fails_no_move_nor_runs_long(redis_client, spec):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    gate = gate_field(spec, BUCKET)
    sent = [due_message(store, f"crafted{n}", gate, 3) for n in range(3)]
    sent.append(due_message(store, "free", None))

    started = time.perf_counter()
    store.state.handover.deliver_due(keys, 500)
    store.state.handover.deliver_due(keys, 500)

    assert time.perf_counter() - started < 1.0
    assert delivered(redis_client, "free")
    check_nothing_lost(redis_client, keys, sent)


def test_a_million_cancelled_keys_in_a_bucket_cost_a_bounded_call(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    pipe = redis_client.pipeline(transaction=False)
    for chunk in range(100):
        gone = (b"gone%d" % (chunk * 10_000 + n) for n in range(10_000))
        pipe.rpush(keys.gate("w", BUCKET), *gone)
    pipe.zadd(f"{keys.gates}ready", {BUCKET: 0})
    pipe.execute()
    sent = [due_message(store, "free", None), due_message(store, "limited", LIMITED)]

    started = time.perf_counter()
    store.state.handover.deliver_due(keys, 500)
    took = time.perf_counter() - started

    assert redis_client.llen(keys.gate("w", BUCKET)) >= 1_000_000 - 1000
    assert took < 0.5, f"one call took {took:.2f} s"
    check_nothing_lost(redis_client, keys, sent)


@pytest.mark.parametrize(
    "bucket", ["a b", "a\nb", "\x00", "t\x00k\x00k", "log", "ready", "s:t", "é\udcff", "x" * 600]
)
def test_any_bucket_name_gets_its_own_keys_and_its_limit(redis_client, bucket):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    gate = gate_field(GateSpec((Rate.parse("1/m"),)).encode(), bucket)
    sent = [due_message(store, f"m{n}", gate, ago_ms=3 - n) for n in range(2)]
    sent.append(due_message(store, "free", None))

    store.state.handover.deliver_due(keys, 500)

    assert delivered(redis_client, "free") and delivered(redis_client, "m0")
    assert not delivered(redis_client, "m1")
    raw = bucket.encode("utf-8", "surrogatepass")
    assert redis_client.lrange(f"{keys.gates}w:".encode() + raw, 0, -1) == [sent[1].key]
    assert redis_client.zrange(f"{keys.gates}ready", 0, -1) == [raw]
    check_nothing_lost(redis_client, keys, sent)


def test_crafted_running_slots_fail_no_move(redis_client):
    """A concurrency-limited bucket whose running slots key holds a string."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    redis_client.set(keys.gate("r", BUCKET), "x")
    gate = gate_field(GateSpec(concurrency=1).encode(), BUCKET)
    sent = [due_message(store, f"one{n}", gate, ago_ms=3 - n) for n in range(2)]
    sent.append(due_message(store, "free", None))

    store.state.handover.deliver_due(keys, 500)

    assert delivered(redis_client, "free")
    check_nothing_lost(redis_client, keys, sent)


def test_a_release_of_big_messages_keeps_within_a_calls_byte_budget(redis_client):
    """Forty messages of 100 kB wait in a bucket (paused while they came in); resumed,
    one call releases no more than the move's byte budget (and one message) of them."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    gate = gate_field(GateSpec((Rate.parse("1000000/s"),)).encode(), BUCKET)
    redis_client.hset(keys.gate("s", BUCKET), "hold", "paused")
    now = store.server_time_ms()
    big = b"x" * 100_000
    for n in range(40):
        payload = b'{"n": "big%d", "pad": "%s"}' % (n, big)
        store.schedule(Scheduled("q", f"big{n}", f"big{n}", now - 1, "q", payload, gate=gate))
    wait_until(
        lambda: store.state.handover.deliver_due(keys, 500) and not redis_client.zcard(keys.pages)
    )
    assert redis_client.llen(keys.gate("w", BUCKET)) == 40
    redis_client.hdel(keys.gate("s", BUCKET), "hold")
    redis_client.zadd(f"{keys.gates}ready", {BUCKET: 0})

    store.state.handover.deliver_due(keys, 500)

    pushed = sum(len(payload) for payload in redis_client.lrange("q", 0, -1))
    assert pushed <= MOVE_BATCH_BYTES + len(big) + 100


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_bucket_stops_no_hand_over(redis_client, craft):
    """The same crafts on the claim path (claim_due.lua: RabbitMQ, SQS)."""
    publisher = ConfirmingPublisher()
    handover = ClaimPublishAck(redis_client, lambda: publisher, release_log=10)
    store = DelayedStore(redis_client, KeySpace(), 500, handover=handover)
    keys = store.keys.for_queue("q")
    craft(redis_client, keys)
    due_message(store, "limited", LIMITED, ago_ms=2)
    due_message(store, "free", None)

    store.move_all_due()

    published = b"".join(message.payload for message in publisher.published)
    assert b'"free"}' in published
    held = redis_client.hexists(keys.messages, b"\x00limited")
    assert held or b'"limited"}' in published, "limited lost"


def test_a_crafted_waiting_list_and_destination_hold_the_message_for_the_fix(redis_client):
    """Its bucket's waiting list and its destination both hold strings: the move can
    neither keep it in its bucket nor deliver it, and fails not (its publish kept it in
    the schedule, as it cannot enter); it waits in the schedule, and goes once the keys
    are fixed."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    redis_client.set(keys.gate("w", BUCKET), "not a list")
    sent = [due_message(store, "limited", LIMITED, ago_ms=2)]
    assert redis_client.zcard(keys.pages) == 1  # could not enter its bucket at publish
    redis_client.set("q", "not a list")

    store.state.handover.deliver_due(keys, 500)

    page = redis_client.zrange(keys.pages, 0, -1)
    assert redis_client.zrange(keys.page(page[0]), 0, -1) == [sent[0].key]
    assert redis_client.hexists(keys.messages, sent[0].key)
    redis_client.delete("q")
    store.state.handover.deliver_due(keys, 500)
    assert delivered(redis_client, "limited")  # unlimited: its bucket is still crafted


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_bucket_fails_no_publish_and_loses_no_message(redis_client, craft):
    """Crafted before a due message of the bucket is published, which puts it straight
    into its bucket (schedule_gated.lua): the publish succeeds, the message is in its
    bucket or in the schedule, and moves go on."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    craft(redis_client, keys)
    sent = [due_message(store, f"limited{n}", LIMITED, ago_ms=2) for n in range(2)]
    check_nothing_lost(redis_client, keys, sent)
    sent.append(due_message(store, "free", None))
    for _ in range(2):
        store.state.handover.deliver_due(keys, 500)
    assert delivered(redis_client, "free") and delivered(redis_client, "limited0")
    check_nothing_lost(redis_client, keys, sent)


@pytest.mark.promise("crafted-input-stops-nothing")
@pytest.mark.parametrize("craft", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_bucket_fails_no_chunk_and_loses_no_message(redis_client, craft):
    """Crafted before a bulk chunk (schedule_many_gated.lua) puts due messages of the
    bucket straight into it: the chunk is stored whole, each message in its bucket or in
    the schedule, and moves go on."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    craft(redis_client, keys)
    now = store.server_time_ms()
    sent = [
        Scheduled("q", name, name, now - 2, "q", b'{"n": "%s"}' % name.encode(), gate=gate)
        for name, gate in (("limited0", LIMITED), ("free", None), ("limited1", LIMITED))
    ]
    store.schedule_chunk(sent)
    check_nothing_lost(redis_client, keys, sent)
    for _ in range(2):
        store.state.handover.deliver_due(keys, 500)
    assert delivered(redis_client, "free") and delivered(redis_client, "limited0")
    check_nothing_lost(redis_client, keys, sent)
