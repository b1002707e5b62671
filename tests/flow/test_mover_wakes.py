"""A mover sleeps until a bucket's next release, and no longer polls before it: with the
Redis broker's move-ahead, a release's time is on the clock messages are judged by (now
plus the lead), so the mover wakes at the release itself, once per release."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.core.moving.mover import Mover
from celery_delayq.testing.releases import release_log
from celery_delayq.testing.waiting import wait_until

pytestmark = pytest.mark.integration

LIMITED = "tests.flow.paced"
SENT = 12


def test_a_mover_makes_about_one_pass_per_release(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = make_app(delayq_rate_limits={LIMITED: "10/s"}, delayq_move_ahead=0.02)
    for n in range(SENT):
        app.send_task(LIMITED, (n,))
    stop = threading.Event()
    with open_store(app) as store:
        mover = Mover(lambda: store, max_sleep=5.0, retry_max=1.0)
        thread = threading.Thread(target=mover.run, args=(stop,), daemon=True)
        thread.start()
        try:
            shard = store.keys.for_queue("default")

            def released() -> int:
                return len(release_log(redis_client, shard).get(LIMITED, []))

            wait_until(lambda: released() == SENT, timeout=20, what="every release")
            passes = mover.passes_total
        finally:
            stop.set()
            thread.join(10)
    # one pass per release, and a few for the start and the first message's entry; a
    # mover that woke the move-ahead early would poll several times before each release
    assert passes <= SENT + 5, f"{passes} passes for {SENT} releases"


def test_a_due_limited_message_waits_in_its_bucket_from_its_publish(
    redis_client: redis.Redis,
) -> None:
    """No mover has to take it from the schedule first: the publish puts it into its
    bucket, lists its queue and wakes the movers for the bucket's release (the first
    message of the bucket only); one due later waits in the schedule."""
    from celery_delayq.core.handover.same_redis import SameRedisMove
    from celery_delayq.core.layout.keys import KeySpace
    from celery_delayq.core.store import DelayedStore, Scheduled
    from tests.flow.harness import gate_of

    store = DelayedStore(redis_client, KeySpace(), 500, handover=SameRedisMove(redis_client))
    keys = store.keys.for_queue("q")
    gate = gate_of(("1/s",), task="t")
    wakes = redis_client.pubsub(ignore_subscribe_messages=True)
    wakes.subscribe(store.keys.wakeup_channel)
    wait_until(lambda: wakes.get_message(timeout=0.1) is None and wakes.subscribed)
    now = store.server_time_ms()

    def publish(name: str, due: int) -> bool:
        return store.schedule(Scheduled("q", name, name, due, "q", b"{}", gate=gate))

    assert publish("first", now) is True
    assert publish("second", now) is False
    assert publish("later", now + 60_000) is True  # the queue's earliest in the schedule
    assert redis_client.lrange(keys.gate("w", "t"), 0, -1) == [b"\x00first", b"\x00second"]
    assert redis_client.zrange(keys.pages, 0, -1) != []
    assert redis_client.sismember(store.keys.queues, "q")
    message = wait_until(lambda: wakes.get_message(timeout=0.5), what="the wake-up")
    released_at = redis_client.zscore(f"{keys.gates}ready", "t")
    assert int(message["data"]) == -(-int(released_at) // 1000)  # the release, in ms
    moved = store.move_due("q")
    assert moved.moved == 1 and redis_client.llen("q") == 1  # the first, released
    wakes.close()
