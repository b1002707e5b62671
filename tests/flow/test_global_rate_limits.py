"""``delayq_global_rate_limits``: a task's own ``rate_limit`` holds across all workers,
and the workers' own per-worker limiting is off; without it, Celery's per-worker limit.
Two real workers, a real Redis; the task ``tests.worker_app.paced`` has
``rate_limit="2/s"``."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import redis

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.testing import publish, wait_until
from celery_delayq.testing.releases import most_in_window, release_log

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

PACED = "tests.worker_app.paced"
#: The keys of queue ``default``, whose release log the tests read.
DEFAULT = KeySpace().for_queue("default")


def starts_by_worker(client: redis.Redis) -> dict[str, list[float]]:
    found: dict[str, list[float]] = defaultdict(list)
    for run in runs(client):
        found[run["worker"]].append(run["at"])
    return {worker: sorted(times) for worker, times in found.items()}


def run_paced(
    make_app: Any, url: str, client: redis.Redis, settings: dict[str, Any], count: int
) -> None:
    """``count`` messages of ``paced`` sent under ``settings`` by a publisher that knows it
    as the workers do (``rate_limit="2/s"``), and run by two workers."""
    app = make_app(**settings)

    @app.task(name=PACED, rate_limit="2/s", shared=False)
    def paced(label: str = "") -> None:
        """The workers' task."""

    args = ("worker", url, settings, "-P", "solo")
    with celery_process(*args, "-n", "w1@%h"), celery_process(*args, "-n", "w2@%h"):
        for number in range(count):
            publish(app, PACED, str(number))
        wait_until(lambda: len(runs(client)) == count, timeout=40, what=f"{count} runs")


@pytest.mark.promise("flow-global-rate-limit", "flow-rate-never-more")
def test_a_tasks_rate_limit_holds_across_two_workers(make_app, redis_server, redis_client):
    settings = {"delayq_global_rate_limits": True}
    run_paced(make_app, redis_server.url, redis_client, settings, 10)

    releases = release_log(redis_client, DEFAULT)[PACED]
    assert len(releases) == 10
    # one limit of 2/s: never more than 2 releases in any second (the server's clock)
    assert most_in_window(releases, 1_000_000) == 2
    workers = starts_by_worker(redis_client)
    assert len(workers) == 2, f"both workers run them: {workers}"
    starts = sorted(at for times in workers.values() for at in times)
    # 10 at 2/s span more than 4 s (4/s, a limit per worker, would take about 2.3 s);
    # a start may lag its release, so the bound leaves a second for that
    assert starts[-1] - starts[0] > 3.0


def test_without_the_setting_each_worker_limits_itself(make_app, redis_server, redis_client):
    """Celery's own behaviour, the control: about 2/s per worker, so more than 2/s in all."""
    settings = {"delayq_global_rate_limits": False}
    run_paced(make_app, redis_server.url, redis_client, settings, 16)

    assert redis_client.llen(DEFAULT.gate_log) == 0, "nothing is held in the store"
    workers = starts_by_worker(redis_client)
    assert len(workers) == 2, f"both workers run them: {workers}"
    starts = [at for times in workers.values() for at in times]
    starts_us = [round(at * 1e6) for at in starts]
    assert most_in_window(starts_us, 1_000_000) > 2, "the two workers' limits add up"


@pytest.mark.promise("flow-global-rate-limit-worker-off")
def test_the_workers_own_rate_limit_is_off_under_the_setting(make_app, redis_server, redis_client):
    """The task's own 2/s, overridden by a global 10/s: were each worker still limiting
    itself to 2/s, no worker could start two of them less than half a second apart."""
    settings = {"delayq_global_rate_limits": True, "delayq_rate_limits": {PACED: "10/s"}}
    run_paced(make_app, redis_server.url, redis_client, settings, 20)

    gaps = [
        later - earlier
        for times in starts_by_worker(redis_client).values()
        for earlier, later in zip(times, times[1:])
    ]
    assert min(gaps) < 0.4, f"a worker still limits itself to 2/s: gaps {sorted(gaps)[:5]}"
