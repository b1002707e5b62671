"""Faults with real processes: movers SIGKILLed mid-drain, and a worker living through a
Redis restart. Nothing is lost or delivered twice in any of them."""

from __future__ import annotations

import random
import sys

import pytest

import celery_delayq
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore
from celery_delayq.testing import (
    RedisServer,
    delivered_numbers,
    schedule_numbered,
    wait_until,
)

from ...helpers import WatchedProcess, celery_process, remember, runs, watched

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(180)]

#: Messages the killed movers drain between them.
MESSAGES = 20_000
#: Each mover is SIGKILLed once it has delivered this many more (uniformly drawn): the
#: kills follow observed progress, so their number does not depend on the machine's speed.
PROGRESS_PER_KILL = (200, 2000)
#: Kills that must land while messages are still due (one per ~1,100 delivered are planned).
LEAST_KILLS_MID_DRAIN = 5


def start_mover(port: int, batch: int) -> WatchedProcess:
    """``python -m tests.core.moving.mover_process``, once it runs."""
    mover = watched(
        [sys.executable, "-m", "tests.core.moving.mover_process", str(port), str(batch)],
        "mover process",
    )
    mover.wait_for_output("ready", timeout=30)
    return mover


@pytest.mark.promise("moved-exactly-once")
def test_movers_killed_mid_batch_lose_nothing_and_duplicate_nothing():
    with RedisServer() as server:
        client = server.client()
        store = DelayedStore(client, KeySpace())
        schedule_numbered(store, "q", MESSAGES, store.server_time_ms())
        rng = random.Random(7)
        left_by_kills: list[int] = []  # still due right after each kill
        while (delivered := client.llen("q")) < MESSAGES:
            target = min(delivered + rng.randint(*PROGRESS_PER_KILL), MESSAGES)
            mover = start_mover(server.port, 50)
            try:
                wait_until(
                    lambda: client.llen("q") >= target,  # noqa: B023 - called right here
                    timeout=60,
                    interval=0.001,
                    what=f"{target} messages are delivered",
                    abort=mover.exited,  # noqa: B023
                )
            finally:
                mover.kill()  # SIGKILL, wherever it is (the last one has finished)
                mover.wait()
            if target < MESSAGES:
                left_by_kills.append(MESSAGES - client.llen("q"))

        assert delivered_numbers(client, "q") == list(range(MESSAGES))
        assert client.hlen(store.keys.for_queue("q").messages) == 0
        mid_drain = [left for left in left_by_kills if left > 0]
        assert len(mid_drain) >= LEAST_KILLS_MID_DRAIN, f"left due by each kill: {left_by_kills}"


@pytest.mark.parametrize("kill", [False, True], ids=["clean restart", "SIGKILL"])
@pytest.mark.promise("kept-across-redis-restart")
def test_pending_tasks_survive_a_redis_restart_with_aof_and_are_delivered(make_app, kill):
    """The tasks are due an hour later, so they are certainly pending when Redis goes
    down; once it is back they are rescheduled to now, and the worker's mover, whose
    connections and scripts the restart took away, delivers them."""
    with RedisServer("--appendfsync", "always", appendonly=True) as server:
        app = make_app(url=server.url)
        sent = [remember(app, str(i), countdown=3600) for i in range(10)]
        settings = {"delayq_mover_max_sleep": 0.5}  # passes again soon after the restart
        with celery_process("worker", server.url, settings, "-P", "solo"):
            server.restart(kill=kill)  # scripts are gone: the mover gets NOSCRIPT

            assert [q.pending for q in celery_delayq.backlog(app)] == [10]
            for task in sent:
                assert celery_delayq.reschedule(app, task.id, countdown=0) == 1
            wait_until(lambda: len(runs(server.client())) == 10, timeout=60)
        assert sorted(r["id"] for r in runs(server.client())) == sorted(s.id for s in sent)
