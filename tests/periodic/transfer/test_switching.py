"""Switching from delayq's beat to another scheduler and back, with real processes: a
delayq beat and a worker run an entry every second; the beat is stopped and
``periodic clear`` run; then no run of ours happens after the settle window, while an
entry of redbeat's beat keeps the same worker busy. Back: redbeat's entry imported, and
a delayq beat runs it, each occurrence once."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from amqp.exceptions import ChannelError

from celery_delayq import periodic
from celery_delayq.periodic.describe import BACKEND_CLEANUP
from celery_delayq.periodic.writer import OccurrenceWriter
from celery_delayq.testing import wait_until

from ...helpers import celery_process, invoke, pending_runs, ready_in, runs

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(240)]

TICK = "tests.worker_app.tick"
#: How long past the settle window a run already in the queue may take to run.
MARGIN = timedelta(seconds=15)


def ran(redis_client: Any, label: str, entry: str | None) -> list[datetime]:
    """When each run of the tick labelled ``label`` (its argument) started, sent by
    delayq's entry ``entry`` (None: by another scheduler)."""
    return [
        datetime.fromtimestamp(run["at"], timezone.utc)
        for run in runs(redis_client)
        if run.get("args") == [label] and run.get("entry") == entry
    ]


def queued(app: Any) -> int:
    """How many messages wait in the queue ``default``."""
    try:
        return ready_in(app, "default")
    except ChannelError:  # on Redis, a queue with nothing in it has no list
        return 0


def occurrences(redis_client: Any, entry: str) -> Counter[datetime]:
    """How many times each occurrence of delayq's entry ``entry`` ran."""
    return Counter(
        datetime.fromisoformat(run["occurrence"])
        for run in runs(redis_client)
        if run.get("entry") == entry
    )


@pytest.mark.promise("periodic-clear-nothing-after-settle")
def test_after_clear_nothing_of_ours_runs_past_the_settle_window_and_back_again(
    make_app: Any, redis_server: Any, redis_client: Any
) -> None:
    app, url = make_app(), redis_server.url
    redbeat = {
        "redbeat_redis_url": url,
        "beat_schedule": {"theirs": {"task": TICK, "schedule": 1.0, "args": ["theirs"]}},
    }
    with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
        periodic.upsert(app, "ours", TICK, 1.0, args=["ours"])
    delayq_beat = ("beat", url, {}, "-S", "delayq", "--pidfile=")
    with celery_process("worker", url, {}, "-P", "solo") as worker:
        with celery_process(*delayq_beat, ready="beat: Starting"):
            # the worker's mover runs what the upsert wrote ahead without any beat: wait
            # for the beat's own first pass too, which adds Celery's cleanup entry
            wait_until(
                lambda: (
                    len(ran(redis_client, "ours", "ours")) >= 3
                    and BACKEND_CLEANUP in {info.entry.name for info in periodic.entries(app)}
                ),
                timeout=60,
            )
        cleared = invoke(app, "periodic", "clear", "--yes")
        cleared_at, settle = datetime.now(timezone.utc), OccurrenceWriter(app).settle
        # ours and Celery's own cleanup, which the delayq beat added
        assert cleared.exit_code == 0 and "removed 2 periodic entries" in cleared.stdout
        assert f"within {settle.total_seconds():g} s" in cleared.stdout

        def nothing_of_ours_left() -> bool:
            pending = [arg for _, arg in pending_runs(app) if arg == "ours"]
            return not pending and queued(app) == 0

        wait_until(
            nothing_of_ours_left, timeout=(settle + MARGIN).total_seconds(), abort=worker.exited
        )

        other = ("beat", url, redbeat, "-S", "redbeat.RedBeatScheduler", "--pidfile=")
        with celery_process(*other, ready="beat: Starting"):
            # the worker took everything queued before redbeat's first run
            wait_until(lambda: ran(redis_client, "theirs", None), timeout=60, abort=worker.exited)
            ours = ran(redis_client, "ours", "ours")
            seen = len(ran(redis_client, "theirs", None))
            wait_until(lambda: len(ran(redis_client, "theirs", None)) >= seen + 5, timeout=60)
            assert ran(redis_client, "ours", "ours") == ours
        assert max(occurrences(redis_client, "ours")) <= cleared_at + settle
        assert periodic.entries(app) == []

        # back: redbeat's entry imported, run by a delayq beat (Celery's cleanup is skipped)
        back = invoke(app, "periodic", "import", "--redbeat-url", url, "--json")
        steps = {step["name"]: step["outcome"] for step in json.loads(back.stdout)}
        assert steps == {"theirs": "added", "celery.backend_cleanup": "skipped"}
        with celery_process(*delayq_beat, ready="beat: Starting"):
            wait_until(lambda: len(occurrences(redis_client, "theirs")) >= 3, timeout=60)
    assert set(occurrences(redis_client, "theirs").values()) == {1}
    assert ran(redis_client, "ours", "ours") == ours
