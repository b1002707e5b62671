"""The mover loop's timing against a real Redis: when it passes, and how often."""

from __future__ import annotations

import time

import redis

from celery_delayq.keys import KeySpace
from celery_delayq.mover import MIN_PASS_SECONDS, Mover, MoverThread
from celery_delayq.store import DelayedStore, MoveResult

from .conftest import wait_for


class CountingStore(DelayedStore):
    """The real store, counting the mover's passes."""

    passes = 0

    def move_all_due(self) -> MoveResult:
        CountingStore.passes += 1
        return super().move_all_due()


def start_mover(port: int) -> MoverThread:
    CountingStore.passes = 0
    mover = Mover(lambda: CountingStore(redis.Redis(port=port), KeySpace()), max_sleep=30,
                  retry_max=1)  # fmt: skip
    thread = MoverThread(mover)
    thread.start()
    wait_for(lambda: CountingStore.passes == 1)  # the first pass, then asleep for 30 s
    return thread


def schedule(store: DelayedStore, name: str, due_ms: int) -> None:
    store.schedule(queue="q", message_id=name, task_id=name, due_ms=due_ms, destination="q",
                   payload=name.encode())  # fmt: skip


def test_a_wake_up_brings_the_pass_forward_to_the_new_due_time_not_to_now(
    redis_client, redis_server
):
    store = DelayedStore(redis_client, KeySpace())
    mover = start_mover(redis_server.port)
    try:
        due = store.server_time_ms() + 600
        schedule(store, "soon", due)  # the queue's earliest: movers are woken

        time.sleep(0.3)
        assert CountingStore.passes == 1  # woken, but it waits for the due time
        wait_for(lambda: redis_client.llen("q") == 1, timeout=5)
        assert store.server_time_ms() >= due
        assert CountingStore.passes == 2
    finally:
        mover.stop()


def test_a_stream_of_new_earliest_messages_costs_no_pass_before_they_are_due(
    redis_client, redis_server
):
    store = DelayedStore(redis_client, KeySpace())
    mover = start_mover(redis_server.port)
    try:
        first_due = store.server_time_ms() + 2000
        for i in range(200):  # each one earlier than the last: 200 wake-ups
            schedule(store, f"t{i}", first_due - i)
        time.sleep(0.5)
        assert CountingStore.passes == 1
        wait_for(lambda: redis_client.llen("q") == 200, timeout=10)
        # due over 0.2 s: a pass per minimum interval at most, plus the first and last
        assert CountingStore.passes <= 1 + 0.2 / MIN_PASS_SECONDS + 2
    finally:
        mover.stop()


def test_passes_are_at_least_the_minimum_interval_apart(redis_client, redis_server):
    store = DelayedStore(redis_client, KeySpace())
    now = store.server_time_ms()
    for i in range(100):  # one message falling due every 2 ms for 0.2 s
        schedule(store, f"t{i}", now + 500 + 2 * i)
    mover = start_mover(redis_server.port)
    try:
        wait_for(lambda: redis_client.llen("q") == 100, timeout=10)
        assert CountingStore.passes <= 1 + 0.2 / MIN_PASS_SECONDS + 2
    finally:
        mover.stop()
