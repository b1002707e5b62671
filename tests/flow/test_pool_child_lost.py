"""A pool process killed mid-task while its worker lives on (SIGKILL of the child only,
as the OOM killer does): the worker's main process gives the task's running slot back at
once, not when its lease (60 s here) ends; a message requeued for the lost run
(``task_reject_on_worker_lost``) runs again in its slot. Real Redis, one real prefork
worker; running-at-once is counted from the tasks' start and end stamps, the killed run
ending as it was killed."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import wait_until

from ..helpers import WatchedProcess, celery_process
from .test_concurrency import (
    STAMPED,
    Run,
    ended,
    held_slots,
    most_at_once,
    queue_keys,
    runs_of,
    settings_of,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

LEASE = 60.0
#: How long a test waits for what follows a kill: a fraction of the lease, so only a slot
#: given back at once (not one whose lease ended) lets the next task start in time.
SOON = LEASE / 4


@contextmanager
def child_killed(
    make_app: Any, url: str, redis_client: Any, **more: Any
) -> Iterator[tuple[Celery, WatchedProcess, Run, float]]:
    """A prefork worker (two processes; limit 1, a lease of 60 s) running a task of a
    lease (of 2 s if delivered again) with a second one waiting in its bucket, whose pool
    process running the first was just SIGKILLed: the app, the worker, the first run, and
    when it was killed."""
    settings = settings_of(1, LEASE, **more)
    app = make_app(**settings)
    with celery_process("worker", url, settings, "-c", "2", "--without-gossip") as worker:
        app.send_task(STAMPED, (LEASE,), {"label": "lost", "again": 2.0})
        (first,) = wait_until(lambda: runs_of(redis_client), timeout=30, what="the first start")
        app.send_task(STAMPED, (0.5,), {"label": "next"})
        waiting = queue_keys(app).gate("w", bucket_of(STAMPED))
        wait_until(lambda: redis_client.llen(waiting) == 1, timeout=30, what="next waits")
        assert task_key(first["id"]) in held_slots(redis_client, app)
        assert first["pid"] != worker.pid  # a pool process, not the worker's main one
        os.kill(first["pid"], signal.SIGKILL)
        yield app, worker, first, time.time()


def with_end(run: Run, at: float) -> Run:
    return {**run, "end": at}


def again_and_next(client: Any, lost: Run) -> tuple[Run, Run]:
    """The run of the ``lost`` run's message delivered again (ended), and the next task's,
    the only other runs."""
    done = runs_of(client)
    again = [run for run in done if run["id"] == lost["id"] and run["pid"] != lost["pid"]]
    assert len(again) == 1 and again[0]["end"] is not None
    (after,) = [run for run in done if run["label"] == "next"]
    assert len(done) == 3
    return again[0], after


@pytest.mark.promise("concurrency-slot-back-child-lost")
def test_a_slot_comes_back_at_once_when_the_pool_process_running_its_task_dies(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1: the pool process running a task is SIGKILLed; its slot is free again, and
    the next task runs, within a quarter of the lease; never two at once; the lost task
    (acknowledged by Celery) does not run again, and the worker lives on."""
    with child_killed(make_app, redis_server.url, redis_client) as (app, worker, lost, killed_at):
        wait_until(
            lambda: task_key(lost["id"]) not in held_slots(redis_client, app),
            timeout=SOON,
            abort=worker.exited,
            what="the lost run's slot given back",
        )
        wait_until(
            lambda: ended(redis_client) == 1, timeout=SOON, abort=worker.exited, what="next done"
        )
        assert worker.popen.poll() is None
        output = worker.output
    assert "WorkerLostError" in output  # Celery saw the pool process lost
    done = runs_of(redis_client)
    assert sorted(run["label"] for run in done) == ["lost", "next"]
    (after,) = [run for run in done if run["label"] == "next"]
    assert killed_at < after["start"] < killed_at + SOON
    assert most_at_once([with_end(lost, killed_at), after]) == 1
    assert held_slots(redis_client, app) == {}


@pytest.mark.promise("concurrency-child-lost-requeued")
def test_a_task_requeued_after_its_pool_process_died_runs_again_in_its_slot(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1, ``task_reject_on_worker_lost``: the pool process running a task is
    SIGKILLed and Celery requeues its message; it runs again at once, in its slot, and the
    next task waits until that run ends: never two at once, and no slot left held."""
    requeue = {"task_reject_on_worker_lost": True}
    with child_killed(make_app, redis_server.url, redis_client, **requeue) as killed:
        app, worker, lost, killed_at = killed
        wait_until(
            lambda: ended(redis_client) == 2, timeout=SOON, abort=worker.exited, what="both done"
        )
    again, after = again_and_next(redis_client, lost)
    # delivered again at once, not once the lease ended; the next one only after it
    assert killed_at < again["start"] < killed_at + SOON
    assert after["start"] >= again["end"]
    assert most_at_once([with_end(lost, killed_at), again, after]) == 1
    assert held_slots(redis_client, app) == {}
