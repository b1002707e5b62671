"""A worker records periodic runs from the task's headers as they start
(worker/periodic_runs.py): crafted headers, crafted records and a Redis outage never stop
the task, and record nothing false."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_delayq import periodic
from celery_delayq.testing import wait_until
from celery_delayq.worker.periodic_runs import end_periodic_run, guard_tasks, starts

pytestmark = pytest.mark.adversarial

OCCURRENCE = datetime(2026, 11, 28, 9, 0, tzinfo=timezone.utc)


def run_with(app, headers: dict[str, Any]) -> bool:
    """What a worker does as it starts a task with these headers: whether it runs."""
    task = app.tasks["celery.backend_cleanup"]  # any task: only its request is read
    task.push_request(**headers)
    try:
        return starts(task)
    finally:
        task.pop_request()


@pytest.fixture
def app(make_app):
    app = make_app()
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "nightly", "x.y", 3600)
    return app


def last_run(app) -> datetime | None:
    found = periodic.get(app, "nightly")
    assert found is not None
    return found.history.last_occurrence


def test_a_periodic_run_is_recorded(app) -> None:
    run_with(app, {"delayq-periodic": "nightly", "delayq-occurrence": OCCURRENCE.isoformat()})
    assert last_run(app) == OCCURRENCE


def test_each_run_is_counted_and_the_count_goes_with_its_entry(app) -> None:
    for hours in (0, 1, 2, 2):  # the last one delivered again: one run of its occurrence
        occurrence = OCCURRENCE + timedelta(hours=hours)
        run_with(app, {"delayq-periodic": "nightly", "delayq-occurrence": occurrence.isoformat()})
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.total_run_count == 3
    periodic.remove(app, "nightly")
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "nightly", "x.y", 3600)
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.total_run_count == 0


@pytest.mark.parametrize(
    "headers",
    [
        {},  # not a periodic task
        {"delayq-periodic": "nightly"},
        {"delayq-periodic": "nightly", "delayq-occurrence": "not a time"},
        {"delayq-periodic": "nightly", "delayq-occurrence": "2026-11-28T09:00:00"},  # naive
        {"delayq-periodic": "nightly", "delayq-occurrence": "9" * 10_000},
        {"delayq-periodic": ["nightly"], "delayq-occurrence": OCCURRENCE.isoformat()},
        {"delayq-periodic": "n" * 10_000, "delayq-occurrence": OCCURRENCE.isoformat()},
        {"delayq-periodic": "nightly", "delayq-occurrence": 1e400},
    ],
)
@pytest.mark.promise("crafted-input-stops-nothing")
def test_crafted_headers_record_nothing_and_raise_nothing(app, headers) -> None:
    run_with(app, headers)
    assert last_run(app) is None
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.total_run_count == 0


def test_with_redis_out_of_reach_the_task_runs_unrecorded_with_a_warning(
    app_factory, caplog
) -> None:
    unreachable = app_factory("redis://127.0.0.1:1/0")
    with caplog.at_level(logging.WARNING):
        run_with(
            unreachable,
            {"delayq-periodic": "nightly", "delayq-occurrence": OCCURRENCE.isoformat()},
        )
    assert "its run could not be recorded" in caplog.text


def headers_of(occurrence: datetime, **more: Any) -> dict[str, Any]:
    return {
        "delayq-periodic": "nightly",
        "delayq-occurrence": occurrence.isoformat(),
        "delayq-overlap": "skip",
        **more,
    }


def ended(app, task_id: str) -> None:
    """What ``task_postrun`` does as the run of ``task_id`` ends."""
    end_periodic_run(task_id=task_id, task=app.tasks["celery.backend_cleanup"])


def test_with_overlap_skip_a_run_is_skipped_while_another_occurrences_run_goes(app) -> None:
    first, second = OCCURRENCE, OCCURRENCE + timedelta(hours=1)
    assert run_with(app, headers_of(first, id="run-1"))
    assert not run_with(app, headers_of(second, id="run-2"))
    assert not run_with(app, headers_of(second, id="run-2"))  # delivered again: one skip
    assert run_with(app, headers_of(first, id="run-1"))  # the same run, again: no overlap
    found = periodic.get(app, "nightly")
    assert found is not None
    assert (found.history.skipped, found.history.total_run_count) == (1, 1)
    assert found.history.last_occurrence == first
    ended(app, "run-1")
    third = OCCURRENCE + timedelta(hours=2)
    assert run_with(app, headers_of(third, id="run-3"))
    found = periodic.get(app, "nightly")
    assert found is not None
    assert (found.history.skipped, found.history.total_run_count) == (1, 2)


def test_a_retried_run_keeps_its_entry_until_its_retry_ends(app) -> None:
    """A retry of the run is the same run: the next occurrence that comes while the
    retry waits is skipped, and the retry is not."""
    first, second = OCCURRENCE, OCCURRENCE + timedelta(hours=1)
    task = app.tasks["celery.backend_cleanup"]
    assert run_with(app, headers_of(first, id="run-1"))
    end_periodic_run(task_id="run-1", task=task, state="RETRY")  # self.retry(countdown=...)
    assert not run_with(app, headers_of(second, id="run-2"))  # the retry is still to come
    assert run_with(app, headers_of(first, id="run-1"))  # the retry itself
    end_periodic_run(task_id="run-1", task=task, state="SUCCESS")
    third = OCCURRENCE + timedelta(hours=2)
    assert run_with(app, headers_of(third, id="run-3"))


def test_the_lease_is_the_workers_time_limit_from_its_command_line(app, redis_client) -> None:
    # celery worker --time-limit=1: the pool kills a run at 1 s; the app's settings
    # do not have it
    guard_tasks(app, 1.0)
    assert run_with(app, headers_of(OCCURRENCE, id="killed"))
    mark = redis_client.hget("delayq:periodic:counts", "running:nightly")
    ends = int(mark.split()[1]) / 1000
    assert ends - time.time() < 30  # not the hour of a run without a limit


def test_with_overlap_allow_runs_start_whatever_runs(app) -> None:
    for hours in (0, 1):
        headers = headers_of(OCCURRENCE + timedelta(hours=hours), id=f"run-{hours}")
        del headers["delayq-overlap"]
        assert run_with(app, headers)
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.skipped == 0


def test_a_run_mark_whose_lease_is_over_no_longer_holds_the_entry(app, redis_client) -> None:
    # the mark of a run whose worker was killed, its lease (its time limit: 1 s) taken
    assert run_with(app, headers_of(OCCURRENCE, id="killed", timelimit=(1, None)))
    later = OCCURRENCE + timedelta(hours=1)
    wait_until(lambda: run_with(app, headers_of(later, id="next")), timeout=10)
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.last_occurrence == later


@pytest.mark.parametrize(
    "mark",
    [
        *(b"", b"garbage", b"1 2 3", b"9" * 400, "é 1".encode()),
        b"1764320400000 " + b"9" * 400,  # a lease to the end of time
        b"1764320400000 1000",  # a lease long over
    ],
)
@pytest.mark.promise("crafted-input-stops-nothing")
def test_a_crafted_running_mark_holds_nothing_and_breaks_nothing(app, redis_client, mark) -> None:
    counts = "delayq:periodic:counts"
    redis_client.hset(counts, "running:nightly", mark)
    redis_client.hset(counts, "skip-counted:nightly", b"\xff" * 50)
    redis_client.hset(counts, "runs:nightly", b"not a number")
    later = OCCURRENCE + timedelta(hours=1)
    assert run_with(app, headers_of(later, id="later"))
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.total_run_count == 1


@pytest.mark.parametrize(
    "extra",
    [
        {"delayq-overlap": ["skip"]},
        {"delayq-overlap": "SKIP"},
        {"timelimit": "9" * 1000},
        {"timelimit": (1e400, None)},
        {"timelimit": (-5, None)},
        {"timelimit": [float("nan")]},
        {"timelimit": None},
    ],
)
@pytest.mark.promise("crafted-input-stops-nothing")
def test_crafted_overlap_headers_start_the_run(app, extra) -> None:
    assert run_with(app, headers_of(OCCURRENCE, id="crafted", **extra))
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.last_occurrence == OCCURRENCE


@pytest.mark.promise("periodic-old-entries-read-same")
def test_the_last_run_an_older_version_recorded_is_still_read(app, redis_client) -> None:
    occurrence_ms = int(OCCURRENCE.timestamp() * 1000)
    redis_client.hset("delayq:periodic:runs", "nightly", f"{occurrence_ms} {occurrence_ms + 5}")
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.last_occurrence == OCCURRENCE
    later = OCCURRENCE + timedelta(hours=1)
    assert run_with(app, headers_of(later, id="later"))  # recorded the new way: read first
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.last_occurrence == later
    periodic.remove(app, "nightly")
    assert not redis_client.hexists("delayq:periodic:runs", "nightly")
    assert redis_client.hkeys("delayq:periodic:counts") == []


def test_a_crafted_skip_count_starts_again_and_the_run_is_still_skipped(app, redis_client) -> None:
    redis_client.hset("delayq:periodic:counts", "skipped:nightly", b"\xffnot a number")
    assert run_with(app, headers_of(OCCURRENCE, id="going"))
    assert not run_with(app, headers_of(OCCURRENCE + timedelta(hours=1), id="skipped"))
    found = periodic.get(app, "nightly")
    assert found is not None and found.history.skipped == 1
