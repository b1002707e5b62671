"""Celery's own options on a periodic entry, with a real ``celery beat`` and a real worker:
an option means what it means under Celery's beat, whenever the occurrence was written
ahead (celery_delayq.beat:Scheduler writes each up to ``delayq_periodic_horizon`` early)."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import pytest

from celery_delayq.testing import wait_until

from ..helpers import run_celery
from .test_periodic_beats import assert_each_ran_once_without_gaps, beat, occurrences, worker

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(120)]

TICK = "tests.worker_app.tick"


@pytest.mark.promise("periodic-expires-from-occurrence")
def test_an_entry_that_expires_in_two_seconds_runs_each_occurrence_written_minutes_ahead(
    redis_server, redis_client
) -> None:
    """Written up to 5 minutes ahead, an occurrence whose ``expires`` counted from its
    write would be discarded by the worker as expired; counted from its own time, as
    Celery's beat counts it from the send, each one runs."""
    settings = {
        "beat_schedule": {"expiring": {"task": TICK, "schedule": 1.0, "options": {"expires": 2}}}
    }
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, settings))
        stack.enter_context(beat(redis_server.url, settings))
        wait_until(lambda: len(occurrences(redis_client, "expiring")) >= 8, timeout=60)
    assert_each_ran_once_without_gaps(occurrences(redis_client, "expiring"), timedelta(seconds=1))


@pytest.mark.promise("periodic-timed-options-refused")
@pytest.mark.parametrize("option", [{"countdown": 5}, {"eta": "2030-01-01T00:00:00"}])
def test_beat_refuses_to_start_with_an_entry_that_sets_countdown_or_eta(
    redis_server, option: dict[str, Any]
) -> None:
    """A ``countdown`` or ``eta`` would move every occurrence to a few seconds after it is
    written ahead: beat refuses such a ``beat_schedule`` entry at its start, naming it."""
    settings = {"beat_schedule": {"counted": {"task": TICK, "schedule": 1.0, "options": option}}}
    ended = run_celery(redis_server.url, settings, "beat", "-S", "delayq", "--pidfile=")
    assert ended.returncode != 0
    assert "beat_schedule['counted']" in ended.stderr
    assert "options may not set eta or countdown" in ended.stderr
