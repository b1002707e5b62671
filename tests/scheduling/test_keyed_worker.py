"""Delay keys end to end: a real ``celery worker``, on a Redis broker (the same-Redis
move) and on RabbitMQ (claim -> publish -> ack from ``delayq_store_url``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

import pytest
from celery import Celery

import celery_delayq
from celery_delayq.testing import wait_until, wait_until_quiescent

from ..brokers.amqp.test_amqp_worker import nothing_left
from ..helpers import REMEMBER, celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

EDITS = 100
EDIT_EVERY = 0.1  # 100 edits in 10 s, each well within the countdown of the one before
COUNTDOWN = 1.0


class Mode:
    """One hand-over mode: the publishing app, how to start its worker, and how to know
    that nothing is left to run (then counting runs is final)."""

    def __init__(
        self,
        app: Celery,
        worker: Callable[[], AbstractContextManager[Any]],
        settled: Callable[[], object],
    ) -> None:
        self.app = app
        self.worker = worker
        self.settled = settled
        if REMEMBER not in app.tasks:  # publishing only: the worker has the real task

            @app.task(name=REMEMBER)
            def remember(label: str = "") -> None: ...

        self.task = app.tasks[REMEMBER]


@pytest.fixture(params=["redis", "amqp"])
def mode(request, make_app, make_amqp_app, amqp_settings, redis_server) -> Iterator[Mode]:
    if request.param == "redis":
        app = make_app()
        yield Mode(
            app,
            lambda: celery_process("worker", redis_server.url, {}, "-P", "solo"),
            lambda: wait_until_quiescent(app, workers=1),
        )
        return
    app = make_amqp_app()
    rabbitmq_url, queue = request.getfixturevalue("rabbitmq_url"), app.conf.task_default_queue
    yield Mode(
        app,
        lambda: celery_process(
            "worker", rabbitmq_url, amqp_settings, "-P", "solo", record_url=redis_server.url
        ),
        lambda: wait_until(lambda: nothing_left(app, queue), timeout=30, what="all ran"),
    )


def runs_after_its_due(run: dict[str, Any], result: celery_delayq.KeyedResult) -> bool:
    """The run started at or after its message's ETA, and that ETA is the due time the
    caller was told. The due time is the ETA rounded up to the millisecond, and a worker
    runs a task at its ETA itself, so the run may start up to 1 ms before the due time."""
    eta = datetime.fromisoformat(run["eta"]).timestamp()
    return result.due - 0.001 <= eta <= result.due + 1e-6 and run["at"] >= eta


def paced(count: int, every: float) -> Iterator[int]:
    """0..count-1, one every ``every`` seconds (the edit rate of a user typing)."""
    start = time.monotonic()
    for n in range(count):
        time.sleep(max(0.0, start + n * every - time.monotonic()))
        yield n


@pytest.mark.slow  # 10 s of edits per mode
def test_a_hundred_edits_run_once_after_the_last_edit_and_its_countdown(
    mode: Mode, redis_client
) -> None:
    with mode.worker():
        results = [
            celery_delayq.debounce(mode.task, (f"edit {n}",), key="user:42", countdown=COUNTDOWN)
            for n in paced(EDITS, EDIT_EVERY)
        ]
        wait_until(lambda: runs(redis_client), timeout=30, what="the debounced task ran")
        mode.settled()

    (run,) = runs(redis_client)
    last = results[-1]
    assert [r.outcome for r in results] == ["scheduled"] + ["replaced"] * (EDITS - 1)
    assert (run["id"], run["label"]) == (last.id, f"edit {EDITS - 1}")
    assert runs_after_its_due(run, last)  # not before the last edit + countdown
    assert last.due >= time.time() - 60


@pytest.mark.slow
def test_max_wait_runs_it_while_the_edits_go_on(mode: Mode, redis_client) -> None:
    """Edits every 0.1 s would push a 1 s debounce out for ever; ``max_wait=2`` runs it
    2 s after the first edit, while edits still come."""
    with mode.worker():
        results = []
        for n in paced(300, EDIT_EVERY):  # at most 30 s; stops at the first run
            results.append(
                celery_delayq.debounce(
                    mode.task, (f"edit {n}",), key="k", countdown=COUNTDOWN, max_wait=2
                )
            )
            if runs(redis_client):
                break
        mode.settled()

    first_run = runs(redis_client)[0]
    ran = next(r for r in results if r.id == first_run["id"])
    capped = [r for r in results if r.due == ran.due]
    assert len(capped) > 1  # every edit after the first second got the same, capped, due
    # the first edit + max_wait (+ the moments between the client's clock and the script's)
    assert ran.due <= results[0].due - COUNTDOWN + 2 + 0.5
    assert runs_after_its_due(first_run, ran)


def test_keep_runs_the_first_payload_once(mode: Mode, redis_client) -> None:
    with mode.worker():
        results = [
            celery_delayq.schedule_keyed(
                mode.task, (f"call {n}",), key="report", on_held="keep", countdown=COUNTDOWN
            )
            for n in range(5)
        ]
        wait_until(lambda: runs(redis_client), timeout=30, what="the kept task ran")
        mode.settled()

    (run,) = runs(redis_client)
    assert (run["id"], run["label"]) == (results[0].id, "call 0")
    assert [r.outcome for r in results] == ["scheduled"] + ["kept"] * 4
    assert {r.id for r in results} == {results[0].id}
