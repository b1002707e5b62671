"""A worker records periodic runs from the task's headers (worker/periodic_runs.py):
crafted headers and a Redis outage never stop the task, and record nothing false."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_delayq import periodic
from celery_delayq.worker.periodic_runs import record_periodic_run

pytestmark = pytest.mark.adversarial

OCCURRENCE = datetime(2026, 11, 28, 9, 0, tzinfo=timezone.utc)


def run_with(app, headers: dict[str, Any]) -> None:
    """What ``task_prerun`` does as a worker starts a task with these headers."""
    task = app.tasks["celery.backend_cleanup"]  # any task: only its request is read
    task.push_request(**headers)
    try:
        record_periodic_run(task=task)
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
