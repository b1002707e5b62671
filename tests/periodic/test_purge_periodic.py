"""``delayq purge`` with a real beat (celery_delayq.beat:Scheduler) and a real worker: the
delayed tasks go, the periodic entries keep running."""

from __future__ import annotations

import json
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone

import pytest

from celery_delayq import periodic
from celery_delayq.testing import wait_until

from ..helpers import celery_process, invoke, remember, runs

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(120)]

TICK = "tests.worker_app.tick"
#: A horizon far longer than the test waits: an entry whose occurrences written ahead were
#: deleted would run nothing again until it had passed.
SETTINGS = {
    "beat_schedule": {"tick": {"task": TICK, "schedule": 1.0}},
    "delayq_periodic_horizon": 300,
}


def ticks_after(redis_client, moment: datetime) -> list[datetime]:
    """The occurrences of ``tick`` that ran, standing for a time after ``moment``."""
    found = (
        datetime.fromisoformat(run["occurrence"])
        for run in runs(redis_client)
        if run.get("entry") == "tick"
    )
    return sorted(when for when in found if when > moment)


@pytest.mark.promise("purge-keeps-periodic")
def test_purge_deletes_delayed_tasks_and_the_periodic_entries_keep_running(
    make_app, redis_server, redis_client
) -> None:
    app = make_app()
    with ExitStack() as stack:
        stack.enter_context(celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"))
        beat = ("beat", redis_server.url, SETTINGS, "-S", "delayq", "--pidfile=")
        stack.enter_context(celery_process(*beat, ready="beat: Starting"))
        started = datetime.now(timezone.utc)
        wait_until(lambda: len(ticks_after(redis_client, started)) >= 2, timeout=30)
        doomed = remember(app, "doomed", countdown=600)

        purged = invoke(app, "purge", "--yes", "--json")
        purged_at = datetime.now(timezone.utc)

        assert purged.exit_code == 0, purged.output
        assert json.loads(purged.stdout) == {"default": 1}  # the delayed task, no occurrence
        assert invoke(app, "show", doomed.id).exit_code == 1
        # the occurrences written ahead before the purge run, each once, with no gap
        wait_until(lambda: len(ticks_after(redis_client, purged_at)) >= 3, timeout=15)

    after = ticks_after(redis_client, purged_at - timedelta(seconds=2))
    assert after == sorted(set(after)), "an occurrence ran twice"
    assert all(b - a == timedelta(seconds=1) for a, b in zip(after, after[1:]))
    info = periodic.get(app, "tick")
    assert info is not None
    assert (info.history.late, info.history.missed) == (0, 0)
