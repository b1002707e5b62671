"""The mover loop against a real Redis: when it passes and how often, and how it lives
through an outage.

Each pass is noted with the Redis time it moved at (``MoveResult.now_ms``), so "no pass
before the due time" is checked on the clock the store goes by, not on elapsed time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import redis

from celery_delayq.core.batching import FIRST, LEAST
from celery_delayq.core.handover.same_redis import BURST_FETCH_US, SameRedisMove
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.moving.mover import MIN_PASS_SECONDS, Mover, MoverThread
from celery_delayq.core.results import MoveResult
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import RedisServer, delivered_numbers, schedule_numbered, wait_until

from ...muting_proxy import MutingProxy

pytestmark = pytest.mark.integration

#: Passes a mover may make while messages fall due over 0.2 s: one per minimum
#: interval at most, plus the first (at start) and the last.
MOST_PASSES_OVER_200_MS = 1 + 0.2 / MIN_PASS_SECONDS + 2


class NotingStore(DelayedStore):
    """The real store; every pass of the mover appends its Redis time (ms) to ``passes``."""

    def __init__(self, client: redis.Redis, passes: list[int], ahead_ms: int = 0) -> None:
        super().__init__(client, KeySpace(), handover=SameRedisMove(client, ahead_ms=ahead_ms))
        self.passes = passes

    def move_all_due(self) -> MoveResult:
        result = super().move_all_due()
        self.passes.append(result.now_ms)
        return result


@contextmanager
def running_mover(port: int, ahead_ms: int = 0) -> Iterator[list[int]]:
    """A mover thread that sleeps up to 30 s between passes unless woken; yields the
    Redis times of its passes (plus ``ahead_ms``: the times messages were judged due by;
    a list of this test's own) once the first is done."""
    passes: list[int] = []
    mover = Mover(
        lambda: NotingStore(redis.Redis(port=port), passes, ahead_ms),
        max_sleep=30,
        retry_max=1,
    )
    thread = MoverThread(mover)
    thread.start()
    try:
        wait_until(lambda: passes, what="the mover's first pass")
        yield passes
    finally:
        thread.stop()


def schedule(store: DelayedStore, name: str, due_ms: int) -> None:
    store.schedule(
        Scheduled(
            queue="q",
            message_id=name,
            task_id=name,
            due_ms=due_ms,
            destination="q",
            payload=name.encode(),
        )
    )


def test_a_wake_up_brings_the_pass_forward_to_the_new_due_time_not_to_now(
    redis_client, redis_server
):
    store = DelayedStore(redis_client, KeySpace())
    with running_mover(redis_server.port) as passes:
        due = store.server_time_ms() + 600
        schedule(store, "soon", due)  # the queue's earliest: movers are woken

        wait_until(lambda: redis_client.llen("q") == 1, timeout=5)
        wait_until(lambda: len(passes) >= 2)  # the pass that moved it has been noted

    # Woken, it planned its next pass for the due time: no pass before it, one after.
    assert len(passes) == 2
    assert passes[1] >= due


@pytest.mark.promise("never-moved-early")
def test_with_move_ahead_a_message_is_moved_that_long_before_it_is_due(redis_client, redis_server):
    """``delayq_move_ahead``: the pass is planned for the due time less the lead (a
    worker then holds the message until the ETA in its header)."""
    store = DelayedStore(redis_client, KeySpace())
    ahead = 500
    with running_mover(redis_server.port, ahead_ms=ahead) as passes:
        due = store.server_time_ms() + 1500
        schedule(store, "soon", due)

        wait_until(lambda: redis_client.llen("q") == 1, timeout=5)
        moved_at = store.server_time_ms()
        wait_until(lambda: len(passes) >= 2)

    assert len(passes) == 2  # woken, it planned one pass, for due - ahead
    assert passes[1] >= due  # judged due: Redis time + ahead
    assert moved_at < due  # in the list before its due time


def test_a_stream_of_new_earliest_messages_costs_no_pass_before_they_are_due(
    redis_client, redis_server
):
    store = DelayedStore(redis_client, KeySpace())
    with running_mover(redis_server.port) as passes:
        first_due = store.server_time_ms() + 2000
        for i in range(200):  # each one earlier than the last: 200 wake-ups
            schedule(store, f"t{i}", first_due - i)
        earliest, latest = first_due - 199, first_due

        wait_until(lambda: redis_client.llen("q") == 200, timeout=10)
        wait_until(lambda: passes[-1] >= latest)  # the last pass has been noted

    assert all(moved_at >= earliest for moved_at in passes[1:]), "a pass before anything was due"
    assert len(passes) <= MOST_PASSES_OVER_200_MS


def test_passes_are_at_least_the_minimum_interval_apart(redis_client, redis_server):
    store = DelayedStore(redis_client, KeySpace())
    now = store.server_time_ms()
    for i in range(100):  # one message falling due every 2 ms for 0.2 s
        schedule(store, f"t{i}", now + 500 + 2 * i)
    latest = now + 500 + 2 * 99
    with running_mover(redis_server.port) as passes:
        wait_until(lambda: redis_client.llen("q") == 100, timeout=10)
        wait_until(lambda: passes[-1] >= latest)  # the last pass has been noted

    assert len(passes) <= MOST_PASSES_OVER_200_MS


def store_on(port: int, batch: int = 500) -> DelayedStore:
    return DelayedStore(redis.Redis(port=port, socket_timeout=5), KeySpace(), batch)


@pytest.mark.slow
def test_redis_down_while_moving_is_logged_retried_and_loses_nothing(caplog):
    caplog.set_level(logging.DEBUG, logger="celery_delayq.core.moving.mover")
    with RedisServer("--appendfsync", "always", appendonly=True) as server:
        store = store_on(server.port)
        due_ms = store.server_time_ms() + 1500
        schedule_numbered(store, "q", 50, due_ms)
        mover = MoverThread(Mover(lambda: store_on(server.port), max_sleep=0.5, retry_max=1))
        mover.start()
        try:
            wait_until(store.movers.all, what="the mover's first pass")  # it is connected
            server.stop(kill=True)
            wait_until(lambda: "retrying in" in caplog.text, timeout=15)
            # Redis runs on this host, so its clock is this one: the messages fall due
            # while it is down.
            wait_until(lambda: time.time() * 1000 > due_ms, timeout=15, what="they are due")
            server.start()
            wait_until(lambda: server.client().llen("q") == 50, timeout=15)
        finally:
            mover.stop()
        assert delivered_numbers(server.client(), "q") == list(range(50))
    assert "ConnectionError" in caplog.text
    messages = [record.getMessage() for record in caplog.records]
    first_failure = next(i for i, m in enumerate(messages) if "retrying in" in m)
    first_move = next(i for i, m in enumerate(messages) if "moved 50 due messages" in m)
    assert first_failure < first_move, "moved before Redis went down: nothing was tested"


def test_a_mover_warns_when_it_delivers_far_behind_the_due_time(redis_server, redis_client, caplog):
    caplog.set_level(logging.DEBUG, logger="celery_delayq.core.moving.mover")
    store = store_on(redis_server.port)
    schedule_numbered(store, "q", 3, store.server_time_ms() - 6000)  # no mover ran for 6 s
    mover = Mover(lambda: store_on(redis_server.port), max_sleep=0.5, retry_max=1)

    mover.move_once()

    assert "moved 3 due messages (0 unreadable), latest 6" in caplog.text
    assert "delivered messages up to 6." in caplog.text
    assert [m["name"] for m in store.movers.all()] == ["mover"]  # the heartbeat


def batches_moved(client: redis.Redis, most: int, budget: float) -> tuple[list[int], int]:
    """Move 4,000 due messages one batch at a time with a store whose batches are sized
    within ``budget`` seconds per call, up to ``most``; the size of each batch moved, and
    the size the store settled on."""
    store = DelayedStore(client, KeySpace(), most, move_call_budget=budget)
    schedule_numbered(store, "q", 4000, store.server_time_ms() - 1)
    sizes = []
    while moved := store.move_due("q").moved:
        sizes.append(moved)
    assert delivered_numbers(client, "q") == list(range(4000))  # each once, whatever the sizes
    return sizes, store.batch.size


def test_batches_shrink_while_calls_take_longer_than_the_budget(redis_client):
    """Given a budget no call can meet (1 us), the batches halve call by call down to the
    least size, and stay there."""
    sizes, settled = batches_moved(redis_client, most=1000, budget=1e-6)

    assert sizes[:3] == [FIRST, FIRST // 2, FIRST // 4]
    assert set(sizes[3:-1]) == {LEAST}
    assert settled == LEAST


def test_batches_grow_to_the_batch_size_while_calls_are_within_the_budget(redis_client):
    """Given a budget every call meets (1 s), full batches double call by call up to
    ``delayq_move_batch_size``, which bounds them."""
    sizes, settled = batches_moved(redis_client, most=1000, budget=1.0)

    assert sizes[:5] == [FIRST, 2 * FIRST, 4 * FIRST, 8 * FIRST, 1000]
    assert settled == 1000


def test_batches_are_sized_by_the_time_redis_spends_not_by_a_slow_path_to_it(
    redis_server, redis_client
):
    """A move call is timed by its script (lua/helpers.lua's worked_us): a path to Redis
    that holds every answer back 0.15 s, three times the budget (0.05 s), does not shrink
    the batches, as it would if the client's wall time were the measure (a busy worker's
    mover thread waits like that for the interpreter lock); they grow as on a direct
    connection, Redis's own time per call being far within the budget."""
    direct = store_on(redis_server.port)
    schedule_numbered(direct, "q", 1000, direct.server_time_ms() - 1)
    with MutingProxy(("127.0.0.1", redis_server.port)) as proxy:
        store = DelayedStore(
            redis.Redis(port=proxy.port, socket_timeout=10), KeySpace(), 500, move_call_budget=0.05
        )
        proxy.delay = 0.15
        results = [store.move_due("q") for _ in range(2)]
    assert [r.moved for r in results] == [FIRST, 2 * FIRST]
    assert all(0 < r.call_seconds < 0.05 for r in results)  # Redis's time, not the path's
    assert store.batch.size > 2 * FIRST
    delivered = delivered_numbers(redis_client, "q")
    assert len(set(delivered)) == len(delivered) == 3 * FIRST  # each moved once


def test_without_a_budget_every_batch_is_the_batch_size(redis_client):
    sizes, settled = batches_moved(redis_client, most=300, budget=0)

    assert sizes == [300] * 13 + [100]
    assert settled == 300


def burst_store(client: redis.Redis, burst_ahead_ms: int = 2000) -> DelayedStore:
    """A store that moves 20 ms ahead, and a dense instant up to ``burst_ahead_ms`` more."""
    move = SameRedisMove(client, ahead_ms=20, burst_ahead_ms=burst_ahead_ms)
    return DelayedStore(client, KeySpace(), 5000, handover=move)


@pytest.mark.parametrize(
    ("count", "look_ahead_ms"),
    [
        (5, 20),  # 5 x BURST_FETCH_US is less than move-ahead: move-ahead alone
        (200, 200 * BURST_FETCH_US // 1000),  # in proportion to the instant's size
        (3000, 20 + 2000),  # bounded: move-ahead plus burst_ahead_ms at most
    ],
)
@pytest.mark.promise("never-moved-early")
def test_a_dense_instant_is_moved_ahead_in_proportion_to_its_size(
    redis_client, count, look_ahead_ms
):
    """Given a message due now and ``count`` messages due together 30 s from now, a pass
    moves the first and plans the next pass the look-ahead before the instant; a pass
    once they are within that look-ahead moves them all, judged due by the Redis time
    plus the look-ahead."""
    store = burst_store(redis_client)
    due = store.server_time_ms() + 30_000
    schedule_numbered(store, "q", 1, store.server_time_ms() - 1, first=count)
    schedule_numbered(store, "q", count, due)

    first = store.move_due("q")

    assert (first.moved, first.next_due_ms) == (1, due)
    assert first.next_lead_ms == look_ahead_ms - 20  # beyond the 20 ms this pass judged by

    schedule_numbered(store, "q2", count, store.server_time_ms() + look_ahead_ms - 10)
    before = store.server_time_ms()
    moved = store.move_due("q2")

    assert delivered_numbers(redis_client, "q2") == list(range(count))
    assert moved.now_ms >= before + look_ahead_ms  # judged by Redis time + look-ahead


@pytest.mark.promise("never-moved-early")
def test_burst_lead_is_off_with_burst_ahead_zero(redis_client):
    store = burst_store(redis_client, burst_ahead_ms=0)
    schedule_numbered(store, "q", 3000, store.server_time_ms() + 30_000)

    result = store.move_due("q")

    assert (result.moved, result.next_lead_ms) == (0, 0)
    assert result.now_ms <= store.server_time_ms() + 20  # judged by the move-ahead alone
