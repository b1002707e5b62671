"""Faults: Redis outages and restarts, and movers killed mid-batch. Nothing is lost or
delivered twice in any of them."""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import time

import pytest
import redis

from celery_delayq.keys import KeySpace
from celery_delayq.mover import Mover, MoverThread
from celery_delayq.store import DelayedStore
from celery_delayq.testing import RedisServer

from .conftest import REPO_ROOT, celery_process, runs, wait_for

pytestmark = pytest.mark.timeout(180)


def store_on(port: int, batch: int = 500) -> DelayedStore:
    return DelayedStore(redis.Redis(port=port, socket_timeout=5), KeySpace(), batch)


def fill(store: DelayedStore, n: int, due_ms: int) -> None:
    """Schedule n messages (payload = their number) in one pipelined round trip."""
    with store.client.pipeline(transaction=False) as pipe:
        for i in range(n):
            call = store.schedule_call(
                queue="q",
                message_id=f"m{i}",
                task_id=None,
                due_ms=due_ms,
                destination="q",
                payload=b"%d" % i,
            )
            store.scripts.schedule(keys=call.keys, args=call.args, client=pipe)  # fmt: skip
        pipe.execute()


def delivered(client: redis.Redis) -> list[int]:
    return sorted(int(x) for x in client.lrange("q", 0, -1))


def test_redis_down_while_moving_is_logged_retried_and_loses_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="celery_delayq.mover")
    with RedisServer("--appendfsync", "always", appendonly=True) as server:
        store = store_on(server.port)
        fill(store, 50, store.server_time_ms() + 1500)
        mover = MoverThread(Mover(lambda: store_on(server.port), max_sleep=0.5, retry_max=1))
        mover.start()
        try:
            server.stop(kill=True)
            wait_for(lambda: "retrying in" in caplog.text, timeout=15)
            time.sleep(2)  # the messages fall due while Redis is down
            server.start()
            wait_for(lambda: server.client().llen("q") == 50, timeout=15)
        finally:
            mover.stop()
        assert delivered(server.client()) == list(range(50))
        assert "ConnectionError" in caplog.text


def test_movers_killed_mid_batch_lose_nothing_and_duplicate_nothing():
    with RedisServer() as server:
        client = server.client()
        store = store_on(server.port)
        fill(store, 20_000, store.server_time_ms())
        rng = random.Random(7)
        kills = 0
        while client.llen("q") < 20_000:
            mover = subprocess.Popen(
                [sys.executable, "-m", "tests.mover_process", str(server.port), "50"],
                cwd=REPO_ROOT, stdout=subprocess.PIPE,
            )  # fmt: skip
            assert mover.stdout is not None and mover.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.05, 0.4))
            mover.kill()  # SIGKILL, wherever it is
            mover.wait()
            kills += 1
            assert kills < 100, "the movers made no progress"
        assert kills >= 2, "the first mover finished before any kill: make the test harder"
        assert delivered(client) == list(range(20_000))
        assert client.hlen(store.keys.for_queue("q").messages) == 0


@pytest.mark.parametrize("kill", [False, True], ids=["clean restart", "SIGKILL"])
def test_pending_tasks_survive_a_redis_restart_with_aof_and_are_delivered(make_app, kill):
    with RedisServer("--appendfsync", "always", appendonly=True) as server:
        app = make_app(url=server.url)
        sent = [app.send_task("tests.worker_app.remember", (str(i),), countdown=4)
                for i in range(10)]  # fmt: skip
        with celery_process("worker", server.url, {}, "-P", "solo"):
            server.restart(kill=kill)  # scripts are gone: the mover gets NOSCRIPT
            wait_for(lambda: len(runs(server.client())) == 10, timeout=60)
        assert sorted(r["id"] for r in runs(server.client())) == sorted(s.id for s in sent)


def test_a_mover_warns_when_it_delivers_far_behind_the_due_time(redis_server, caplog):
    caplog.set_level(logging.DEBUG, logger="celery_delayq.mover")
    store = store_on(redis_server.port)
    redis_server.client().flushall()
    fill(store, 3, store.server_time_ms() - 6000)  # as if no mover ran for six seconds
    mover = Mover(lambda: store_on(redis_server.port), max_sleep=0.5, retry_max=1)

    mover.move_once()

    assert "moved 3 due messages (0 unreadable), latest 6" in caplog.text
    assert "delivered messages up to 6." in caplog.text
    assert [m["name"] for m in store.movers()] == ["mover"]  # the heartbeat
