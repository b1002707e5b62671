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
