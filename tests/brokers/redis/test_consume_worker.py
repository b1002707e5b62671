"""What Celery does with the messages a worker holds works as on stock kombu when the
worker consumes atomically (brokers/redis/consume.py): ``inspect active`` and
``reserved``, revoking a reserved task, and ``task_reject_on_worker_lost`` when a pool
child is SIGKILLed mid-task."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from celery_delayq.testing import wait_until, wait_until_quiescent

from ...helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

SETTINGS = {
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 4,  # tests.worker_app's is 1: nothing would be reserved
    "broker_transport_options": {"visibility_timeout": 10},
}


def ids(app: Any, what: str) -> set[str]:
    """Task ids the workers report for ``inspect <what>`` (active, reserved)."""
    replies = getattr(app.control.inspect(timeout=2), what)() or {}
    return {task["id"] for tasks in replies.values() for task in tasks}


@pytest.mark.slow
def test_inspect_revoke_and_a_pool_child_lost_mid_task(make_app, redis_server, redis_client):
    app = make_app(**SETTINGS)
    prefork = ("-P", "prefork", "-c", "1")
    with celery_process("worker", redis_server.url, SETTINGS, *prefork):
        first = app.send_task("tests.worker_app.hold", ("first",), kwargs={"seconds": 60})
        wait_until(lambda: runs(redis_client), timeout=30, what="the first task started")
        second = app.send_task("tests.worker_app.hold", ("second",), kwargs={"seconds": 0})
        revoked = app.send_task("tests.worker_app.hold", ("revoked",), kwargs={"seconds": 0})
        wait_until(lambda: ids(app, "reserved") == {second.id, revoked.id}, timeout=30)
        assert ids(app, "active") == {first.id}
        assert redis_client.hlen("unacked") == 3  # each taken and recorded in one step

        app.control.revoke(revoked.id)
        os.kill(runs(redis_client)[0]["pid"], signal.SIGKILL)  # the pool child, mid-task
        wait_until(lambda: len(runs(redis_client)) == 3, timeout=60, what="three runs")
        wait_until_quiescent(app, workers=1, timeout=60)
    started = [(run["id"], run["redelivered"]) for run in runs(redis_client)]
    assert started[0] == (first.id, False)
    assert sorted(started[1:]) == sorted([(second.id, False), (first.id, True)])
    assert redis_client.hlen("unacked") == 0 and redis_client.llen("default") == 0


#: Taken messages come back 3 s after their worker last had them; workers look every 1 s.
RESTORING = {
    "worker_prefetch_multiplier": 2,
    "broker_transport_options": {
        "visibility_timeout": 3,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
}
STOCK = {**RESTORING, "broker_transport": "redis"}  # kombu's own transport, as before upgrading


@pytest.mark.slow
@pytest.mark.promise(
    "dead-worker-tasks-run-elsewhere", "rolling-upgrade-restores-both-ways", "ready-never-lost"
)
def test_a_stock_worker_and_ours_on_one_queue_lose_nothing_when_both_die(
    make_app, redis_server, redis_client
):
    """Rolling upgrade: a stock kombu worker and one of ours share a queue, both are
    SIGKILLed while they hold messages (running and prefetched), and a worker of ours
    started afterwards runs every task: what either left behind comes back."""
    app = make_app(**RESTORING)
    prefork = ("-P", "prefork", "-c", "1")
    with (
        celery_process("worker", redis_server.url, STOCK, *prefork, "-n", "stock@%h") as stock,
        celery_process("worker", redis_server.url, RESTORING, *prefork, "-n", "ours@%h") as ours,
    ):
        sent = [  # each worker runs one and holds one prefetched
            app.send_task("tests.worker_app.hold", (f"t{n}",), kwargs={"seconds": 60})
            for n in range(4)
        ]
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=30, what="both run one")
        wait_until(lambda: redis_client.hlen("unacked") == 4, timeout=30, what="each holds two")
        stock.kill()
        ours.kill()
        stock.wait(timeout=20)
        ours.wait(timeout=20)
    held = {run["id"] for run in runs(redis_client)}
    with celery_process("worker", redis_server.url, RESTORING, "-P", "solo", "-n", "after@%h"):
        wait_until_quiescent(app, workers=1, timeout=90)
    first, then = runs(redis_client)[:2], runs(redis_client)[2:]
    assert {run["id"] for run in first} == held and not any(run["redelivered"] for run in first)
    assert sorted(run["id"] for run in then) == sorted(task.id for task in sent)  # none lost
    assert all(run["redelivered"] for run in then)  # each came back once
    assert redis_client.hlen("unacked") == 0
    assert redis_client.scard("_delayq.landings") == 0 or all(
        redis_client.llen(b"_delayq.landing." + member) == 0
        for member in redis_client.smembers("_delayq.landings")
    )


@pytest.mark.slow
@pytest.mark.promise("acks-late-reruns-only-on-death")
def test_a_worker_killed_after_the_task_ended_and_before_its_ack(
    make_app, redis_server, redis_client
):
    """The task ends and the worker is frozen before it can ack (the task SIGSTOPs it),
    then SIGKILLed: the message is still recorded as unacknowledged, and runs again on
    another worker (acks_late is at-least-once: a second run, never a loss)."""
    app = make_app(**RESTORING)
    with celery_process("worker", redis_server.url, RESTORING, "-P", "prefork", "-c", "1") as w:
        sent = app.send_task("tests.worker_app.freeze_worker_at_the_end")
        wait_until(lambda: runs(redis_client), timeout=30, what="the task ran")
        wait_until(lambda: stopped(w.pid), timeout=30, what="the worker froze")
        assert redis_client.hlen("unacked") == 1  # ended, not acknowledged
        w.kill()
        w.wait(timeout=20)
    with celery_process("worker", redis_server.url, RESTORING, "-P", "solo", "-n", "after@%h"):
        wait_until_quiescent(app, workers=1, timeout=60)
    assert [(run["id"], run["redelivered"]) for run in runs(redis_client)] == [
        (sent.id, False),
        (sent.id, True),
    ]


def stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): its state in /proc is T."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"
