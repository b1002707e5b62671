"""A concurrency-limited task stopped by its time limit gives its slot back at once, not
when its lease (60 s here) ends: at its hard limit (the pool kills the process running
it; the worker's main process gives the slot back), and at its soft one (the task fails
where it runs); a message Celery requeues after its hard limit runs again, in a slot, and
leaks none. Real Redis, one real prefork worker (two pool processes); both messages wait
in their bucket before the worker starts, so the first one released is the one a limit
stops. The stopped run has no end stamp."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import wait_until

from ..helpers import WatchedProcess, celery_process
from .test_concurrency import STAMPED, Run, ended, held_slots, most_at_once, runs_of, settings_of
from .test_pool_child_lost import LEASE, SOON, again_and_next, with_end

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

#: The time limit (seconds) of the first task, which would otherwise run for a lease.
LIMIT = 2


@contextmanager
def stopped_by_limit(
    make_app: Any, url: str, redis_client: Any, limits: dict[str, int], **more: Any
) -> Iterator[tuple[WatchedProcess, Run]]:
    """A worker (limit 1, a lease of 60 s) running a task of a lease (of 0.5 s when
    delivered again) under the time ``limits``, deaf to SIGTERM under a hard one, a task
    of 0.5 s waiting in its bucket: the worker and the limited run, once that run's slot
    is seen given back, which must be within a quarter of the lease after its limit."""
    settings = settings_of(1, LEASE, **more)
    app = make_app(**settings)
    first_kwargs = {"label": "limited", "again": 0.5, "deaf": "time_limit" in limits}
    app.send_task(STAMPED, (LEASE,), first_kwargs, **limits)
    app.send_task(STAMPED, (0.5,), {"label": "next"})
    with celery_process("worker", url, settings, "-c", "2", "--without-gossip") as worker:
        (first,) = wait_until(lambda: runs_of(redis_client), timeout=30, what="the first start")
        assert first["label"] == "limited" and first["pid"] != worker.pid  # a pool process
        wait_until(
            lambda: task_key(first["id"]) not in held_slots(redis_client, app),
            timeout=LIMIT + SOON,
            abort=worker.exited,
            what="the limited run's slot given back",
        )
        # its lease (60 s from its last renewal) is far from over
        assert time.time() < first["start"] + LIMIT + SOON
        yield worker, first
    assert held_slots(redis_client, app) == {}


def next_after(first: Run, client: Any) -> Run:
    """The next task's run: started once the limited run was stopped (not while it ran
    within its limit, nor once a lease had ended), and the only other run."""
    done = runs_of(client)
    assert sorted(run["label"] for run in done) == ["limited", "next"]
    (after,) = [run for run in done if run["label"] == "next"]
    # the limit counts from the run's acceptance, a moment before its start stamp
    assert first["start"] + LIMIT - 1 < after["start"] < first["start"] + LIMIT + SOON
    return after


@pytest.mark.promise("concurrency-slot-back-time-limit")
def test_a_slot_comes_back_at_once_when_its_task_hits_its_hard_time_limit(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1: a task deaf to SIGTERM runs into its hard time limit (2 s) and Celery
    SIGKILLs its pool process (no ``task_postrun`` there); its slot is free again, and
    the next task runs, long before its lease (60 s) would end; never two at once, and
    the worker lives on."""
    limit = {"time_limit": LIMIT}
    with stopped_by_limit(make_app, redis_server.url, redis_client, limit) as (worker, first):
        wait_until(
            lambda: ended(redis_client) == 1, timeout=SOON, abort=worker.exited, what="next done"
        )
        killed = f"pid:{first['pid']} exited with 'signal 9 (SIGKILL)'"  # no task_postrun
        wait_until(lambda: killed in worker.output, timeout=SOON, what="the kill logged")
        assert worker.popen.poll() is None
        output = worker.output
    assert "Hard time limit (2s) exceeded" in output
    after = next_after(first, redis_client)
    assert first["end"] is None  # killed: no end stamp
    assert most_at_once([with_end(first, first["start"] + LIMIT - 1), after]) == 1


@pytest.mark.promise("concurrency-slot-back-time-limit")
def test_a_slot_comes_back_at_once_when_its_task_hits_its_soft_time_limit(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1: a task runs into its soft time limit (2 s), which raises in it, and fails;
    its slot is free again, and the next task runs, long before its lease would end."""
    limit = {"soft_time_limit": LIMIT}
    with stopped_by_limit(make_app, redis_server.url, redis_client, limit) as (worker, first):
        wait_until(
            lambda: ended(redis_client) == 1, timeout=SOON, abort=worker.exited, what="next done"
        )
        output = worker.output
    assert "SoftTimeLimitExceeded" in output
    after = next_after(first, redis_client)
    assert most_at_once([with_end(first, first["start"] + LIMIT - 1), after]) == 1


@pytest.mark.promise("concurrency-time-limit-requeued")
def test_a_task_requeued_after_its_hard_time_limit_runs_again_in_a_slot(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1, ``acks_late`` without ``task_acks_on_failure_or_timeout``: a task runs
    into its hard time limit and Celery requeues its message; it runs again, and so does
    the next task, one at a time, long before the lease would end, and no slot is left
    held."""
    requeue = {"task_acks_on_failure_or_timeout": False}
    limit = {"time_limit": LIMIT}
    with stopped_by_limit(make_app, redis_server.url, redis_client, limit, **requeue) as found:
        worker, first = found
        wait_until(
            lambda: ended(redis_client) == 2, timeout=SOON, abort=worker.exited, what="both done"
        )
    again, after = again_and_next(redis_client, first)
    for run in (again, after):
        assert first["start"] + LIMIT - 1 < run["start"] < first["start"] + LIMIT + SOON
    assert most_at_once([with_end(first, first["start"] + LIMIT - 1), again, after]) == 1
