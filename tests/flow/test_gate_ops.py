"""Cancel, reschedule and the read-outs (counts, listing, doctor) of a message while it
waits in its bucket: due, out of the schedule's pages, its record still in MSG."""

from __future__ import annotations

import pytest
import redis

from celery_delayq.brokers.connect import open_store
from celery_delayq.core.health.consistency import consistency_findings
from celery_delayq.core.health.health_checks import OK
from celery_delayq.core.layout.delay_keys import DelayKey
from celery_delayq.core.layout.gates import shard_key
from celery_delayq.core.layout.keys import KeySpace, QueueKeys
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing.waiting import wait_until
from tests.flow.harness import gate_of
from tests.flow.test_gate_hostile import delivered, due_message, make_store, server_us

pytestmark = pytest.mark.integration

ONE_A_SECOND = gate_of(("1/s",), task="t")


def one_waiting(client: redis.Redis) -> tuple[DelayedStore, QueueKeys, float]:
    """A store whose bucket "t" (1/s) released "first" and holds "second"; and when the
    bucket may release again (us)."""
    store = make_store(client)
    keys = store.keys.for_queue("q")
    due_message(store, "first", ONE_A_SECOND, ago_ms=2)
    due_message(store, "second", ONE_A_SECOND, ago_ms=1)
    store.state.handover.deliver_due(keys, 500)
    assert delivered(client, "first") and not delivered(client, "second")
    assert client.llen(keys.gate("w", "t")) == 1
    return store, keys, client.zscore(f"{keys.gates}ready", "t")


def test_a_cancelled_waiting_message_never_runs(redis_client):
    store, keys, ready_at = one_waiting(redis_client)

    assert store.cancel("second") == 1
    wait_until(lambda: server_us(redis_client) > ready_at, what="the bucket's time")
    store.state.handover.deliver_due(keys, 500)

    assert not delivered(redis_client, "second")
    assert redis_client.hlen(keys.messages) == 0
    assert redis_client.exists(keys.gate("w", "t"), f"{keys.gates}ready") == 0


def test_a_waiting_message_is_counted_pending(redis_client):
    store, _, _ = one_waiting(redis_client)
    assert store.pending_counts(["q"]) == {"q": 1}
    assert [m.key for m in store.find("second")] == [b"\x00second"]


def deliveries(client: redis.Redis, name: str) -> int:
    return sum(b'"%s"}' % name.encode() in payload for payload in client.lrange("q", 0, -1))


@pytest.mark.parametrize("later_ms", [300, 1800])
def test_a_rescheduled_waiting_message_runs_once_at_its_new_time(redis_client, later_ms):
    """Rescheduled before (300 ms) or after (1.8 s) its bucket's turn (1/s, ~1.03 s)."""
    store, keys, _ = one_waiting(redis_client)
    later = store.server_time_ms() + later_ms

    assert store.reschedule("second", later, lambda raw: raw) == 1
    missing = 0

    def moved() -> bool:
        nonlocal missing
        missing += store.state.handover.deliver_due(keys, 500).missing
        return delivered(redis_client, "second") and not redis_client.exists(f"{keys.gates}ready")

    wait_until(moved, what="the rescheduled message's release")

    assert deliveries(redis_client, "second") == 1 and missing == 0
    released_us = int(redis_client.lindex(f"{keys.gates}log", 0).split()[0])
    assert released_us >= later * 1000
    assert redis_client.hlen(keys.messages) == 0
    assert redis_client.zcard(keys.pages) == 0


def test_a_waiting_message_is_counted_as_waiting_not_overdue(redis_client):
    """Pending, and found by task id; in the backlog it is waiting (a limit holds it), not
    overdue (no mover is late); the pages' listing leaves it to `celery delayq limits`."""
    store, _, _ = one_waiting(redis_client)
    (backlog,) = store.backlog()
    assert (backlog.pending, backlog.waiting, backlog.overdue) == (1, 1, 0)
    assert store.pending(queue="q") == []


def test_doctor_finds_nothing_wrong_with_a_waiting_message(redis_client):
    store, _, _ = one_waiting(redis_client)
    findings = consistency_findings(store)
    assert all(finding.level == OK for finding in findings), findings


def test_doctor_still_finds_a_limited_message_nothing_will_move(redis_client):
    """Its record out of the schedule and out of its bucket (as a failed release left
    one): found, and repaired into the schedule, from where it enters its bucket."""
    store, keys, _ = one_waiting(redis_client)
    redis_client.delete(keys.gate("w", "t"))

    (finding,) = consistency_findings(store, repair=True)

    assert "1 records without a schedule entry" in finding.message
    assert redis_client.zcard(keys.pages) == 1


def gates_in_two_shards(space: KeySpace) -> tuple[bytes, bytes]:
    """Two limit keys of task "t" whose buckets lie in different shards of queue q."""
    first = gate_of(("1/s",), task="t", key="k0")
    first_shard = space.shard_of("q", shard_key(first)).shard
    for n in range(1, 100):
        other = gate_of(("1/s",), task="t", key=f"k{n}")
        if space.shard_of("q", shard_key(other)).shard != first_shard:
            return first, other
    raise AssertionError("no two shards found")


@pytest.mark.xfail(
    strict=True,
    reason="finding: with delayq_store_shards > 1 a gated message is stored in its "
    "bucket's shard, not its delay key's: one key's messages in two buckets are both pending",
)
def test_a_delay_key_holds_across_buckets_in_a_sharded_store(redis_client):
    space = KeySpace(shards=4)
    store = DelayedStore(redis_client, space, 500)
    later = store.server_time_ms() + 60_000
    outcomes = []
    for n, gate in enumerate(gates_in_two_shards(space)):
        message = Scheduled("q", f"m{n}", f"m{n}", later, "q", b"{}", gate=gate)
        outcomes.append(store.schedule_keyed(message, DelayKey("x")).outcome)
    assert outcomes == ["scheduled", "replaced"]


def test_a_revoked_waiting_message_is_cancelled_in_its_bucket(make_app, redis_client):
    """``app.control.revoke`` of a message waiting in its bucket: the broadcast's ids are
    cancelled in the store (diverter.py), so no mover releases it."""
    app = make_app(delayq_rate_limits={"tests.flow.limited": "1/m"})
    first, second = (app.send_task("tests.flow.limited", (n,)) for n in range(2))
    with open_store(app) as store:
        keys = store.keys.for_queue("default")
        store.move_all_due()
        assert redis_client.llen("default") == 1
        assert redis_client.llen(keys.gate("w", "tests.flow.limited")) == 1
        assert store.find(second.id)

        app.control.revoke(second.id)

        assert store.find(second.id) == [] and store.find(first.id) == []
        assert store.pending_counts(["default"]) == {"default": 0}
