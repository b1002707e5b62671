"""The bucket index (lua/gates.lua's ``P:{Q}:fc:index``) on a real Redis, written by the
real move, hold and slot scripts: it keeps a bucket as long as its state matters, so the
reader (store/flow.py) finds idle buckets without a SCAN of the keyspace; members whose
time is past are dropped a bounded few a call, and crafted members show as no bucket."""

from __future__ import annotations

import math

import pytest
import redis

from celery_delayq.core.layout.gates import GateSpec, gate_field
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.core.store import DelayedStore
from celery_delayq.testing.waiting import wait_until
from tests.flow.harness import gate_of
from tests.flow.test_gate_hostile import delivered, due_message, make_store

pytestmark = pytest.mark.integration

ONE_A_SECOND = gate_of(("1/s",), task="t")
#: Index members a call that writes the index drops at most, and how much longer (ms)
#: than its state a bucket is indexed (lua/gates.lua).
INDEX_PRUNE, INDEX_SLACK = 100, 3_600_000


def index(client: redis.Redis, keys: QueueKeys) -> dict[bytes, float]:
    return dict(client.zrange(keys.gate_index, 0, -1, withscores=True))


def state_ends_ms(client: redis.Redis, keys: QueueKeys, bucket: str) -> int:
    """When (ms, the Redis clock) the bucket's state expires, read at one instant."""
    with client.pipeline(transaction=True) as pipe:
        pipe.time()
        pipe.pttl(keys.gate("s", bucket))
        (seconds, micros), ttl = pipe.execute()
    assert ttl > 0
    return int(seconds * 1000 + micros // 1000 + ttl)


def covers(until: float, state_ends: int) -> bool:
    """Whether an index member's time is when its state expires: the state's expiry is
    set with the member, to its time (give or take the millisecond PTTL rounds)."""
    return abs(until - state_ends) <= 1


def released_once(client: redis.Redis) -> tuple[DelayedStore, QueueKeys]:
    """A store whose bucket "t" released its one message: idle, out of the ready set."""
    store = make_store(client)
    keys = store.keys.for_queue("q")
    due_message(store, "first", ONE_A_SECOND)
    store.state.handover.deliver_due(keys, 500)
    assert delivered(client, "first") and not client.exists(keys.gate_ready)
    return store, keys


def test_the_index_keeps_a_bucket_while_its_state_lasts_and_for_ever_while_paused(
    redis_client: redis.Redis,
) -> None:
    store, keys = released_once(redis_client)
    (until,) = index(redis_client, keys).values()
    assert covers(until, state_ends_ms(redis_client, keys, "t"))
    assert redis_client.hget(keys.gate("s", "t"), "indexed") == b"%d" % until
    assert [b.name for b in store.buckets("q")] == [b"t"]

    store.hold_bucket(["q"], "t", "pause")
    assert index(redis_client, keys) == {b"t": math.inf}
    assert redis_client.pttl(keys.gate("s", "t")) == -1  # a pause never expires

    store.hold_bucket(["q"], "t", "resume")
    (until,) = index(redis_client, keys).values()
    assert covers(until, state_ends_ms(redis_client, keys, "t"))


def test_a_save_within_the_slack_writes_no_index_member_again(
    redis_client: redis.Redis,
) -> None:
    """The state is saved at each release; its index member, only once the state
    would outlast it: each member is marked, and the next save leaves it."""
    store, keys = released_once(redis_client)
    (until,) = index(redis_client, keys).values()
    # a day after its release (a moment ago), and the slack
    assert until - store.server_time_ms() > 86_400_000 + INDEX_SLACK - 1_000
    redis_client.zadd(keys.gate_index, {b"t": 5e15})  # marked: not the "indexed" written
    due_message(store, "second", ONE_A_SECOND)
    wait_until_released(store, keys, "second")
    assert index(redis_client, keys) == {b"t": 5e15}  # left as it was
    assert covers(until, state_ends_ms(redis_client, keys, "t"))  # the expiry too

    redis_client.hset(keys.gate("s", "t"), "indexed", 1)  # as if the state outlasted it
    due_message(store, "third", ONE_A_SECOND)
    wait_until_released(store, keys, "third")
    (until,) = index(redis_client, keys).values()
    assert covers(until, state_ends_ms(redis_client, keys, "t"))


def wait_until_released(store: DelayedStore, keys: QueueKeys, name: str) -> None:
    client = store.client
    wait_until(
        lambda: store.state.handover.deliver_due(keys, 500) is not None and delivered(client, name),
        what=f"{name} released",
    )


def test_a_slot_taken_or_renewed_indexes_its_bucket_until_its_lease_ends(
    redis_client: redis.Redis,
) -> None:
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    gate = gate_field(GateSpec(concurrency=1, lease_ms=60_000).encode(), "c")
    sent = due_message(store, "first", gate)
    store.state.handover.deliver_due(keys, 500)
    assert delivered(redis_client, "first")
    redis_client.delete(keys.gate_index)  # as if its member had gone

    take = store.scripts.slot_take
    assert take(keys=keys.slot_take_keys("c"), args=[sent.key, "renew", "c"]) == [1, 60_000]

    (lease_end,) = redis_client.zrange(keys.gate("r", "c"), 0, -1, withscores=True)
    assert index(redis_client, keys) == {b"c": lease_end[1]}
    (bucket,) = store.buckets("q")
    assert (bucket.name, bucket.running, bucket.waiting) == (b"c", 1, 0)


def test_members_past_their_time_are_dropped_a_bounded_few_a_call(
    redis_client: redis.Redis,
) -> None:
    """Crafted or expired members: the past ones go INDEX_PRUNE a call (no call loops over
    the index), and none of them, past or not, shows as a bucket."""
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    past = {f"t\x00old-{n}".encode(): n for n in range(3 * INDEX_PRUNE)}
    crafted = {b"\xff\x00*?[": -math.inf, b"": 1, b"t\x00later": math.inf, b"x" * 600: 9e15}
    redis_client.zadd(keys.gate_index, {**past, **crafted})

    due_message(store, "first", ONE_A_SECOND)
    store.state.handover.deliver_due(keys, 500)

    left = index(redis_client, keys)
    assert len(left) == len(past) + len(crafted) + 1 - INDEX_PRUNE
    assert b"t" in left and b"t\x00later" in left and b"x" * 600 in left
    assert [b.name for b in store.buckets("q")] == [b"t"]
    assert [(f.task, f.buckets, f.released) for f in store.task_flows()] == [("t", 1, 1)]


def test_a_slot_is_taken_whatever_the_index_holds(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    redis_client.hset(keys.gate("s", "c"), "spec", "c1/60000")
    redis_client.set(keys.gate_index, "not mine")

    take = store.scripts.slot_take
    assert take(keys=keys.slot_take_keys("c"), args=[b"m", "take", "c"]) == [2, 60_000]
    assert redis_client.zcard(keys.gate("r", "c")) == 1
    assert redis_client.get(keys.gate_index) == b"not mine"
