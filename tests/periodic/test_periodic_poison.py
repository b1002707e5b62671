"""Bad periodic records beside good entries, with real ``celery beat`` and ``celery
worker`` processes (issue 34, findings 2, 7 and 8): records written into the store by
hand (nested too deep, options no message can be built with, a crontab that never fires,
a last run past the year 9999) stop no good entry, in any beat. In-process:
tests/periodic/test_periodic_entries_adversarial.py."""

from __future__ import annotations

import warnings
from contextlib import ExitStack
from datetime import timedelta

import pytest

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from .test_periodic_beats import TICK, assert_each_ran_once_without_gaps, beat, occurrences, worker
from .test_periodic_entries_adversarial import SHAPES

pytestmark = [
    pytest.mark.system,
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.promise("periodic-bad-entry-stops-no-other"),
]

#: A short horizon: a pass that writes nothing shows within two seconds.
SETTINGS = {
    "delayq_periodic_horizon": 2,
    "beat_schedule": {"tick": {"task": TICK, "schedule": 1.0}},
}


def test_good_entries_run_each_occurrence_once_beside_bad_records_in_two_beats(
    make_app, redis_server, redis_client
) -> None:
    app = make_app(**{k: v for k, v in SETTINGS.items() if k != "beat_schedule"})
    for shape, write in SHAPES.items():  # named to be read before the good entries
        write(app, f"a-{shape}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", periodic.UnknownTaskWarning)  # the worker knows it
        periodic.upsert(app, "api-tick", TICK, 2.0)
    with open_store(app) as store:  # a last run past the year 9999
        store.client.hset(store.keys.periodic_runs, "tick", "999999999999999 1")

    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url, SETTINGS))
        beats = [stack.enter_context(beat(redis_server.url, SETTINGS)) for _ in range(2)]
        wait_until(
            lambda: (
                len(occurrences(redis_client)) >= 12
                and len(occurrences(redis_client, "api-tick")) >= 6
            ),
            timeout=60,
            abort=lambda: next(
                (f"{b.name} exited" for b in beats if b.popen.poll() is not None), None
            ),
        )
    assert_each_ran_once_without_gaps(occurrences(redis_client), timedelta(seconds=1))
    assert_each_ran_once_without_gaps(occurrences(redis_client, "api-tick"), timedelta(seconds=2))
    logs = "".join(b.output for b in beats)
    for shape in ["unroutable", "unserializable"]:
        assert f"periodic entry 'a-{shape}' (version" in logs
    for shape in ["crontab-words", "deep", "deep-args", "not-json"]:
        assert f"periodic entry 'a-{shape}' cannot be read" in logs
