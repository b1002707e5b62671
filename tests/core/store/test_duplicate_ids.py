"""Many pending messages under one task id (a retry loop gone wrong, a crafted publisher):
every store script call stays as short as with as many distinct task ids, cancel still
removes them all, and another queue is not held up. Real redis-server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from celery_delayq.core.batching import FIRST
from celery_delayq.core.handover import MOVE_BATCH_BYTES
from celery_delayq.core.handover.claims import CLAIM_HEADER
from celery_delayq.core.handover.same_redis import SameRedisMove
from celery_delayq.core.layout.keys import KeySpace, QueueKeys
from celery_delayq.core.layout.queue_counters import LATENESS_BUCKETS_MS
from celery_delayq.core.layout.record import task_key
from celery_delayq.core.results import MoveResult
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import delivered_numbers, wait_until

from .observe import inconsistencies

pytestmark = pytest.mark.integration

MANY = 20_000


def schedule_same_id(
    store: DelayedStore, queue: str, count: int, due_ms: int, task_id: str = "same-id"
) -> None:
    """``count`` messages of one task id, numbered by payload (``delivered_numbers``)."""
    store.schedule_many(
        Scheduled(queue, f"m{i}", task_id, due_ms, queue, b"%d" % i) for i in range(count)
    )


def schedule_distinct_ids(store: DelayedStore, queue: str, count: int, due_ms: int) -> None:
    store.schedule_many(
        Scheduled(queue, f"m{i}", f"task-{i}", due_ms, queue, b"%d" % i) for i in range(count)
    )


@pytest.fixture
def slowlog(redis_client: redis.Redis) -> Iterator[redis.Redis]:
    """The client, with the server's SLOWLOG settings put back after the test (the server
    is shared by the session's tests)."""
    saved = redis_client.config_get("slowlog-*")
    redis_client.config_set("slowlog-max-len", 1_000)
    yield redis_client
    for name, value in saved.items():
        redis_client.config_set(name, value)
    redis_client.slowlog_reset()


def script_calls_logged(client: redis.Redis) -> list[int]:
    """The durations (us) of the script calls in the SLOWLOG."""
    return [
        int(entry["duration"])
        for entry in client.slowlog_get(1_000)
        if entry["command"].split()[:1] in ([b"EVALSHA"], [b"EVAL"])
    ]


def mean_script_call_us(client: redis.Redis) -> float:
    """The mean Redis time of the script calls since the last ``config_resetstat``: many
    calls averaged, so a call that waited for a core on a busy machine hardly moves it."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("usec", 0)) / max(1, int(stats.get("calls", 0)))


@dataclass
class Calibration:
    """The same work with 20,000 distinct task ids, on this machine now."""

    schedule_mean_us: float
    move_mean_us: float
    longest_us: int


def calibrate(client: redis.Redis) -> Calibration:
    store = DelayedStore(client, KeySpace(), 500)
    client.config_set("slowlog-log-slower-than", 1_000)
    client.slowlog_reset()
    client.config_resetstat()
    schedule_distinct_ids(store, "calibration", MANY, store.server_time_ms() - 1)
    schedule_mean = mean_script_call_us(client)
    client.config_resetstat()
    while store.move_due("calibration").moved:
        pass
    calibration = Calibration(
        schedule_mean, mean_script_call_us(client), max(script_calls_logged(client), default=0)
    )
    client.flushall()
    return calibration


@pytest.mark.slow
def test_every_script_call_stays_as_short_as_with_distinct_task_ids_when_20000_messages_share_one(  # noqa: E501
    slowlog,
):
    """Each phase's mean script call is within a few times that of the same phase with
    distinct task ids, and no call is logged over a ceiling far above both (SLOWLOG):
    before, one cancel call removed all 20,000 and each move call rewrote the task's list
    of them per message, calls of a quarter of a second to seconds."""
    calibration = calibrate(slowlog)
    ceiling_us = max(250_000, 50 * calibration.longest_us)
    slowlog.config_set("slowlog-log-slower-than", ceiling_us)
    slowlog.slowlog_reset()
    store = DelayedStore(slowlog, KeySpace(), 500)
    now = store.server_time_ms()

    slowlog.config_resetstat()
    schedule_same_id(store, "q", MANY, now + 3_600_000)
    assert mean_script_call_us(slowlog) <= 5 * calibration.schedule_mean_us
    slowlog.config_resetstat()
    assert store.cancel("same-id") == MANY
    assert mean_script_call_us(slowlog) <= 5 * calibration.move_mean_us  # of 500 messages
    assert store.pending_counts(["q"]) == {"q": 0}
    assert script_calls_logged(slowlog) == [], "a call went over the ceiling"

    schedule_same_id(store, "q", MANY, now - 1)
    slowlog.config_resetstat()
    while store.move_due("q").moved:
        # checked after each call, so that a long call fails the test at once
        assert script_calls_logged(slowlog) == [], "a move call went over the ceiling"
    assert mean_script_call_us(slowlog) <= 5 * calibration.move_mean_us
    assert delivered_numbers(slowlog, "q") == list(range(MANY))
    assert inconsistencies(store) == []


class RecordingMove(SameRedisMove):
    """The same-Redis move, noting each call's queue shard, limit and moved count."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.calls: list[tuple[str, int, int]] = []

    def deliver_due(self, queue: QueueKeys, limit: int, more_calls: bool = False) -> MoveResult:
        result = super().deliver_due(queue, limit, more_calls)
        self.calls.append((queue.label, limit, result.moved))
        return result


def test_another_queues_due_messages_are_moved_by_its_first_call_of_a_pass_whatever_a_queue_before_it_holds(  # noqa: E501
    redis_client,
):
    """Queues take turns a batch each, and each queue's batch is sized by its own calls: a
    queue visited first, full of messages under one task id, cannot shrink the next
    queue's first batch (the size every queue starts at) or hold it up for long calls."""
    move = RecordingMove(redis_client)
    store = DelayedStore(redis_client, KeySpace(), 500, handover=move, move_call_budget=0.002)
    now = store.server_time_ms()
    schedule_same_id(store, "a-same-id", 5_000, now - 1)
    schedule_distinct_ids(store, "b-plain", FIRST, now - 1)

    result = store.move_all_due()

    first_of_b = next(call for call in move.calls if call[0] == "b-plain")
    assert first_of_b == ("b-plain", FIRST, FIRST)
    assert move.calls.index(first_of_b) == 1  # right after the first batch of a-same-id
    assert result.moved == 5_000 + FIRST
    assert delivered_numbers(redis_client, "a-same-id") == list(range(5_000))
    assert delivered_numbers(redis_client, "b-plain") == list(range(FIRST))


def test_a_cancel_racing_movers_removes_or_leaves_to_them_each_message_of_the_task_once(
    redis_server, redis_client
):
    """Cancel of 20,000 messages under one task id takes many calls; movers delivering
    them meanwhile take the rest: each message is cancelled or delivered, never both,
    and none is left or lost."""
    store = DelayedStore(redis_client, KeySpace(), 100)
    schedule_same_id(store, "q", MANY, store.server_time_ms() - 1)
    done = threading.Event()
    moved: list[int] = []

    def mover() -> None:
        own = DelayedStore(redis_server.client(), store.keys, 100)
        while not done.is_set():
            moved.append(own.move_due("q").moved)

    movers = [threading.Thread(target=mover) for _ in range(2)]
    for thread in movers:
        thread.start()
    try:
        wait_until(lambda: sum(moved) > 0)  # the movers are under way
        cancelled = store.cancel("same-id")
    finally:
        done.set()
        for thread in movers:
            thread.join()
    moved.append(store.move_all_due().moved)

    delivered = delivered_numbers(redis_client, "q")
    assert len(delivered) == len(set(delivered)) == sum(moved)
    assert cancelled + len(delivered) == MANY
    assert store.pending_counts(["q"]) == {"q": 0}
    assert store.cancel("same-id") == 0
    assert inconsistencies(store) == []


def test_extra_messages_listed_the_way_earlier_stores_did_are_still_cancelled_and_moved(
    redis_client,
):
    """A store written before the by-task index listed a task's extra messages as one
    string of sequence numbers under the task key: those are read, moved and cancelled."""
    store = DelayedStore(redis_client, KeySpace(), 500)
    keys = store.keys.for_queue("q")
    now = store.server_time_ms()
    schedule_same_id(store, "q", 250, now + 3_600_000, task_id="old-later")
    schedule_same_id(store, "q", 3, now - 1, task_id="old-due")
    for task_id in ("old-later", "old-due"):
        as_written_before(redis_client, keys, task_id)
    assert redis_client.exists(keys.by_task) == 0

    assert len(store.find("old-later")) == 250
    assert store.move_all_due().moved == 3
    assert store.cancel("old-later") == 250
    assert redis_client.hlen(keys.duplicates) == 0
    assert inconsistencies(store) == []


def as_written_before(client: redis.Redis, keys: QueueKeys, task_id: str) -> None:
    """Move a task's extra messages from the by-task index to the list earlier stores kept
    in the duplicates hash (``task key -> "seq seq ..."``)."""
    own = task_key(task_id)
    prefix = b"%d:%s" % (len(own), own)
    members: list[Any] = client.zrangebylex(keys.by_task, b"(" + prefix, b"(" + prefix + b":")
    client.zrem(keys.by_task, *members)
    client.hset(keys.duplicates, own, b" ".join(m[len(prefix) :] for m in members))


def test_a_message_a_mover_holds_for_another_broker_is_left_to_it_by_cancel(redis_client):
    """A mover handing messages to another broker claims them first (claim -> publish ->
    ack): cancel leaves those to it, so each is delivered (acked) or, given back, is
    pending again and cancelled then; none is both delivered and counted cancelled."""
    store = DelayedStore(redis_client, KeySpace(), 500)
    shard = store.keys.for_queue("q")
    now = store.server_time_ms()
    schedule_same_id(store, "q", 120, now - 1)
    schedule_same_id(store, "q", 30, now + 3_600_000)
    owner, policy = "pass-1", [60_000, 5, "mover-1", 2_000, 0]  # lease, tries, claimer, hold, log
    claim = [*shard.page_args(), 40, MOVE_BATCH_BYTES, owner, *policy]
    claimed = store.scripts.claim_due(keys=shard.handover_keys(), args=claim)[CLAIM_HEADER::2]
    assert len(claimed) == 40

    assert store.cancel("same-id") == 110  # all but the claimed ones

    acked, back = claimed[:20], claimed[20:]
    ack = [*shard.page_args(), owner, len(acked), *acked, *LATENESS_BUCKETS_MS]
    assert store.scripts.ack_claimed(keys=shard.handover_keys(), args=ack)[0] == 20
    release = [*shard.page_args(), owner, 0, 5, 1_000, "broker away", *back]
    store.scripts.release_claimed(keys=shard.handover_keys(), args=release)
    assert store.pending_counts(["q"]) == {"q": 20}
    assert store.cancel("same-id") == 20
    assert store.pending_counts(["q"]) == {"q": 0}
    assert redis_client.hlen(shard.messages) == 0
    assert inconsistencies(store) == []
