"""Periodic entries in the store with real ``celery beat`` processes and a real worker
(celery_delayq.beat:Scheduler): any number of beats, each occurrence run once."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone

import pytest

from celery_delayq import periodic
from celery_delayq.testing import wait_until

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SETTINGS = {
    "beat_schedule": {"tick": {"task": "tests.worker_app.tick", "schedule": 1.0}},
}


def occurrences(redis_client, entry: str = "tick") -> Counter[datetime]:
    """How many times each occurrence of ``entry`` ran."""
    return Counter(
        datetime.fromisoformat(run["occurrence"])
        for run in runs(redis_client)
        if run.get("entry") == entry
    )


def beat(redis_url: str, name: str):
    return celery_process(
        "beat", redis_url, SETTINGS, "-S", "delayq", "--pidfile=", ready="beat: Starting"
    )


def test_three_beats_at_once_run_each_occurrence_of_a_one_second_entry_once(
    redis_server, redis_client
) -> None:
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"))
        for name in ("one", "two", "three"):
            stack.enter_context(beat(redis_server.url, name))
        wait_until(lambda: len(occurrences(redis_client)) >= 10, timeout=60)
    seen = occurrences(redis_client)
    first, last = min(seen), max(seen)
    # every second from the first to the last ran, and none twice
    expected = [
        first + timedelta(seconds=n) for n in range(int((last - first).total_seconds()) + 1)
    ]
    assert sorted(seen) == expected
    assert [when for when, count in seen.items() if count > 1] == []


def test_an_upsert_while_beats_run_changes_the_rhythm_from_its_next_occurrence(
    make_app, redis_server, redis_client
) -> None:
    app = make_app()
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"))
        for name in ("one", "two"):
            stack.enter_context(beat(redis_server.url, name))
        wait_until(lambda: len(occurrences(redis_client)) >= 3, timeout=60)
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            changed = periodic.upsert(app, "api-tick", "tests.worker_app.tick", 2.0)
        assert not changed.replaced
        periodic.pause(app, "tick")  # the settings' entry, paused at run time
        paused_at = datetime.now(timezone.utc)
        settle = timedelta(seconds=7)  # what may already be in a queue goes on (writer.py)
        wait_until(
            lambda: (
                len([w for w in occurrences(redis_client, "api-tick") if w > paused_at + settle])
                >= 3
            ),
            timeout=60,
        )
    ticks, api_ticks = occurrences(redis_client), occurrences(redis_client, "api-tick")
    assert [when for when, count in ticks.items() if count > 1] == []
    assert [when for when, count in api_ticks.items() if count > 1] == []
    assert [when for when in ticks if when > paused_at + settle] == []
    spaced = sorted(api_ticks)
    assert all(
        later - earlier == timedelta(seconds=2) for earlier, later in zip(spaced, spaced[1:])
    )
