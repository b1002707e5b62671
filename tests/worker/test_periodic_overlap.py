"""An entry's ``overlap`` with a real beat and real workers: with ``skip``, no run starts
while the previous one is going, and the skips are counted; with ``allow``, runs
overlap; a worker killed mid-run blocks its entry until the run's lease is over.

Each run of the entry's task waits until the test releases it (tests.worker_app.gate), so
what overlaps is decided by the test, not by how fast the machine is."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_delayq import periodic
from celery_delayq.periodic.history import History
from celery_delayq.testing import wait_until

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(150)]


def settings_of(overlap: str, task: str = "tests.worker_app.gated") -> dict[str, Any]:
    return {"beat_schedule": {"gated": {"task": task, "schedule": 1.0, "overlap": overlap}}}


def beat(redis_url: str, settings: dict[str, Any]):
    return celery_process(
        "beat", redis_url, settings, "-S", "delayq", "--pidfile=", ready="beat: Starting"
    )


def phases(redis_client, phase: str) -> list[dict[str, Any]]:
    return [run for run in runs(redis_client) if run.get("phase") == phase]


def history(app) -> History:
    found = periodic.get(app, "gated")
    assert found is not None
    return found.history


def release(redis_client, count: int = 1) -> None:
    redis_client.rpush("test:gate", *["go"] * count)


def assert_one_at_a_time(redis_client) -> None:
    """Each run ended before the next one started."""
    events = sorted(
        (run["at"], run["phase"], run["id"])
        for run in runs(redis_client)
        if run.get("phase") in ("start", "end")
    )
    going: set[str] = set()
    for _, phase, task_id in events:
        if phase == "start":
            assert not going, f"{task_id} started while {going} went on"
            going.add(task_id)
        else:
            going.discard(task_id)


@pytest.mark.promise("periodic-overlap-skip")
def test_with_overlap_skip_no_run_starts_while_the_previous_one_goes_and_skips_are_counted(
    make_app, redis_server, redis_client
) -> None:
    app, settings = make_app(), settings_of("skip")
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, settings, "-c", "3"))
        stack.enter_context(beat(redis_server.url, settings))
        try:
            wait_until(lambda: len(phases(redis_client, "start")) == 1, timeout=60)
            wait_until(lambda: history(app).skipped >= 2, timeout=60)  # a free pool, yet skipped
            assert len(phases(redis_client, "start")) == 1
            release(redis_client)
            wait_until(lambda: len(phases(redis_client, "start")) == 2, timeout=60)
            skipped = history(app).skipped
            wait_until(lambda: history(app).skipped >= skipped + 2, timeout=60)
            assert len(phases(redis_client, "start")) == 2
        finally:
            release(redis_client, 20)
        wait_until(lambda: len(phases(redis_client, "end")) == len(phases(redis_client, "start")))
    assert_one_at_a_time(redis_client)
    found = history(app)
    started = {run["occurrence"] for run in phases(redis_client, "start")}
    assert found.total_run_count == len(started)
    assert found.skipped >= 4
    shown = periodic.get(app, "gated")
    assert shown is not None and shown.entry.overlap == "skip"


def test_with_overlap_allow_runs_overlap(make_app, redis_server, redis_client) -> None:
    app, settings = make_app(), settings_of("allow")
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, settings, "-c", "3"))
        stack.enter_context(beat(redis_server.url, settings))
        try:
            # two runs going at once: none has ended (none was released)
            wait_until(lambda: len(phases(redis_client, "start")) >= 2, timeout=60)
            assert phases(redis_client, "end") == []
        finally:
            release(redis_client, 20)
        wait_until(lambda: len(phases(redis_client, "end")) >= 2)
    assert history(app).skipped == 0


def test_a_retried_run_holds_its_entry_and_its_retry_is_not_skipped(
    make_app, redis_server, redis_client
) -> None:
    """The first run retries itself in 3 s: the occurrences sent meanwhile are skipped,
    and the retry runs."""
    app, settings = make_app(), settings_of("skip", "tests.worker_app.gated_after_a_retry")
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, settings, "-c", "3"))
        stack.enter_context(beat(redis_server.url, settings))
        try:
            wait_until(lambda: len(phases(redis_client, "retried")) == 1, timeout=60)
            wait_until(lambda: len(phases(redis_client, "start")) == 1, timeout=60)
            wait_until(lambda: history(app).skipped >= 1, timeout=60)  # the next ones
        finally:
            release(redis_client, 20)
        wait_until(lambda: len(phases(redis_client, "end")) == len(phases(redis_client, "start")))
    retried, started = phases(redis_client, "retried")[0], phases(redis_client, "start")[0]
    assert (started["id"], started["occurrence"]) == (retried["id"], retried["occurrence"])
    assert_one_at_a_time(redis_client)


@pytest.mark.promise("periodic-overlap-lease")
def test_a_worker_killed_mid_run_blocks_its_entry_until_the_lease_is_over(
    make_app, redis_server, redis_client
) -> None:
    """Two workers; the one running the entry's run is SIGKILLed: the other skips the
    entry's occurrences until the run's lease (the task's time limit, 8 s) is over, then
    runs the next."""
    app, settings = make_app(), settings_of("skip", "tests.worker_app.gated_briefly")
    with ExitStack() as stack:
        first = stack.enter_context(
            celery_process("worker", redis_server.url, settings, "-P", "solo", "-n", "first@%h")
        )
        second = stack.enter_context(
            celery_process("worker", redis_server.url, settings, "-P", "solo", "-n", "second@%h")
        )
        stack.enter_context(beat(redis_server.url, settings))
        try:
            wait_until(lambda: len(phases(redis_client, "start")) == 1, timeout=60)
            killed = phases(redis_client, "start")[0]
            victim = first if killed["pid"] == first.pid else second
            victim.kill()
            victim.wait()
            mark = redis_client.hget("delayq:periodic:counts", "running:gated")
            assert mark is not None
            lease_end = datetime.fromtimestamp(int(mark.split()[1]) / 1000, timezone.utc)
            skipped = history(app).skipped
            wait_until(lambda: len(phases(redis_client, "start")) == 2, timeout=60)
            wait_until(lambda: history(app).skipped > skipped)  # the survivor skipped, then
        finally:
            release(redis_client, 20)
    again = phases(redis_client, "start")[1]
    assert again["occurrence"] > killed["occurrence"]
    assert datetime.fromtimestamp(again["at"], timezone.utc) >= lease_end - timedelta(
        milliseconds=5
    )


def solo(name: str) -> tuple[str, ...]:
    return ("-P", "solo", "-n", f"{name}@%h")


def test_the_lease_of_a_run_is_the_time_limit_given_on_the_workers_command_line(
    make_app, redis_server, redis_client
) -> None:
    """Two workers started with ``--time-limit=6`` (the task has none of its own); the one
    running the entry's run is SIGKILLed: the other runs the entry again once those 6 s
    are over, not an hour later."""
    app, settings = make_app(), settings_of("skip")
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                celery_process("worker", redis_server.url, settings, *solo(name), "--time-limit=6")
            )
            for name in ("first", "second")
        ]
        stack.enter_context(beat(redis_server.url, settings))
        try:
            wait_until(lambda: len(phases(redis_client, "start")) == 1, timeout=60)
            killed = phases(redis_client, "start")[0]
            victim = next(worker for worker in workers if worker.pid == killed["pid"])
            victim.kill()
            victim.wait()
            wait_until(lambda: len(phases(redis_client, "start")) == 2, timeout=60)
        finally:
            release(redis_client, 20)
    assert phases(redis_client, "start")[1]["occurrence"] > killed["occurrence"]
    assert history(app).skipped >= 1
