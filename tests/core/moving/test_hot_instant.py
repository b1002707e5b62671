"""A hot instant on real workers: many tasks due together are moved ahead of their ETA
in proportion to their number (``delayq_burst_ahead``), and still none starts early."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest

from celery_delayq.testing import wait_until, wait_until_quiescent

from ...helpers import REMEMBER, celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), pytest.mark.slow]

TASKS = 300


@pytest.mark.promise("never-starts-early")
def test_tasks_of_a_hot_instant_start_at_their_eta_never_before(
    make_app, redis_server, redis_client
):
    """Given two solo workers (prefetch 4) and 300 tasks published with one ETA, the
    instant is moved about 300 x 2 ms (BURST_FETCH_US) ahead, so the workers hold it
    before it is due; then every task runs once, none before the ETA."""
    app = make_app()
    worker = ("worker", redis_server.url, {}, "-P", "solo", "--prefetch-multiplier", "4")
    with celery_process(*worker, "-n", "w1@%h"), celery_process(*worker, "-n", "w2@%h"):
        eta = datetime.now(timezone.utc) + timedelta(seconds=3 + TASKS * 0.005)
        app.set_current()
        with app.producer_or_acquire() as producer:
            sent = [
                app.send_task(REMEMBER, (f"t{i}",), eta=eta, producer=producer)
                for i in range(TASKS)
            ]
        assert datetime.now(timezone.utc) < eta, "publishing took longer than the lead"
        wait_until(lambda: len(runs(redis_client)) >= TASKS, timeout=60, what="every task ran")
        wait_until_quiescent(app, workers=2)

    started = [r["at"] for r in runs(redis_client)]
    assert min(started) >= eta.timestamp(), "a task of the hot instant started before its ETA"
    assert Counter(r["id"] for r in runs(redis_client)) == Counter(s.id for s in sent)
