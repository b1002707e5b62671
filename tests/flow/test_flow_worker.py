"""Pause, resume and throttle (celery_delayq/ops/pause.py) against a real ``celery worker``
that moves and runs a flow-controlled task: what the release log (``P:{Q}:fc:log``) and
the recorded runs show. The commands are run as a user runs them: a real ``celery
delayq pause`` process, and click's runner."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

from celery_delayq import pause_queue, resume_queue, throttle
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.testing import wait_until
from celery_delayq.testing.releases import most_in_window, release_log

from ..helpers import celery_process, invoke, remember, run_celery, runs

pytestmark = pytest.mark.system

LIMITED = "tests.worker_app.limited"
LIMITED_429 = "tests.worker_app.limited_429"
#: 4/s: a key's releases are about 258 ms apart (the rate less its 3% catch-up).
SETTINGS: dict[str, Any] = {"delayq_rate_limits": {LIMITED: "4/s", LIMITED_429: "4/s"}}
PER_SECOND = 4
SECOND_US = 1_000_000


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app(**SETTINGS)


def send(app: Celery, task: str, key: str, *args: Any) -> None:
    app.send_task(task, args, headers={"delayq_limit_key": key})


def releases(app: Celery, task: str, key: str) -> list[int]:
    """When (Redis clock, us) the release log saw each release of the key's bucket,
    oldest first."""
    with open_store(app) as store:
        log = release_log(store.client, store.keys.for_queue("default"))
    return log.get(bucket_of(task, key), [])


def waiting(app: Celery, task: str, key: str) -> int:
    with open_store(app) as store:
        queue = store.keys.for_queue("default")
        return int(store.client.llen(queue.gate("w", bucket_of(task, key))))


def server_us(app: Celery) -> int:
    with open_store(app) as store:
        return store.server_time_ms() * 1000


@pytest.mark.promise("pause-releases-nothing", "pause-holds-later-messages", "resume-within-limits")
def test_a_paused_key_runs_nothing_until_resumed_then_its_backlog_within_its_limit(
    app: Celery, redis_server: Any, redis_client: redis.Redis
) -> None:
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"):
        paused = run_celery(redis_server.url, SETTINGS, "delayq", "pause", LIMITED, "--key", "a")
        assert paused.returncode == 0, paused.stderr
        assert f"{LIMITED} (key a): paused, 0 message(s) waiting" in paused.stdout
        for i in range(8):
            send(app, LIMITED, "a", f"a{i}")
        wait_until(lambda: waiting(app, LIMITED, "a") == 8, what="the backlog in its bucket")
        remember(app, "after", countdown=1)  # moved by a pass after the backlog entered
        wait_until(lambda: [r for r in runs(redis_client) if r["label"] == "after"], timeout=20)
        assert releases(app, LIMITED, "a") == []
        assert [r for r in runs(redis_client) if r.get("key") == "a"] == []

        resumed_at = server_us(app)
        resumed = invoke(app, "resume", LIMITED, "--key", "a")
        assert resumed.exit_code == 0, resumed.output
        assert "releasing, 8 message(s) waiting" in resumed.output
        wait_until(
            lambda: len([r for r in runs(redis_client) if r.get("key") == "a"]) == 8, timeout=30
        )

    times = releases(app, LIMITED, "a")
    assert len(times) == 8 and times[0] > resumed_at
    assert most_in_window(times, SECOND_US) <= PER_SECOND
    assert times[0] - resumed_at < 2_000_000  # the resume woke the mover


@pytest.mark.promise("throttle-holds-one-key")
def test_a_throttle_stops_its_keys_releases_for_its_time_and_no_other_keys(
    app: Celery, redis_server: Any, redis_client: redis.Redis
) -> None:
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"):
        for i in range(40):
            send(app, LIMITED, "a", f"a{i}")
            send(app, LIMITED, "b", f"b{i}")
        wait_until(
            lambda: len(releases(app, LIMITED, "a")) >= 2 and len(releases(app, LIMITED, "b")) >= 2,
            timeout=20,
            what="both keys releasing",
        )
        hold = throttle(app, LIMITED, 5, key="a")
        assert hold.until_us is not None and not hold.paused
        held_from = hold.until_us - 5_000_000  # the Redis time the hold was set at
        wait_until(
            lambda: [t for t in releases(app, LIMITED, "a") if t >= hold.until_us],
            timeout=20,
            what="a release after the throttle",
        )

    a_times, b_times = releases(app, LIMITED, "a"), releases(app, LIMITED, "b")
    assert [t for t in a_times if held_from < t < hold.until_us] == []
    first_after = min(t for t in a_times if t >= hold.until_us)
    assert first_after - hold.until_us < 1_500_000  # within a move interval, give or take
    b_meanwhile = [t for t in b_times if held_from < t < hold.until_us]
    assert 5 <= len(b_meanwhile) <= 5 * PER_SECOND + 1
    assert most_in_window(a_times, SECOND_US) <= PER_SECOND
    assert most_in_window(b_times, SECOND_US) <= PER_SECOND


@pytest.mark.promise("throttle-current-own-key")
def test_a_task_throttles_its_own_key_on_a_429_and_retries(
    app: Celery, redis_server: Any, redis_client: redis.Redis
) -> None:
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"):
        send(app, LIMITED_429, "x", 3, True)  # its first run meets the 429
        for _ in range(4):
            send(app, LIMITED_429, "x", 3)
        for _ in range(8):
            send(app, LIMITED_429, "y", 3)
        wait_until(
            lambda: len([r for r in runs(redis_client) if r.get("phase") == "run"]) == 13,
            timeout=40,
            what="every run and the retry",
        )

    throttled = [r for r in runs(redis_client) if r.get("phase") == "throttled"]
    assert len(throttled) == 1 and throttled[0]["key"] == "x"
    until = throttled[0]["until"]
    held_from = until - 3_000_000
    x_times, y_times = releases(app, LIMITED_429, "x"), releases(app, LIMITED_429, "y")
    assert [t for t in x_times if held_from < t < until] == []
    assert [t for t in x_times if t >= until]  # the rest went after it
    assert [t for t in y_times if held_from < t < until]  # y went on meanwhile
    retried = [r for r in runs(redis_client) if r["id"] == throttled[0]["id"]]
    assert [(r["phase"], r["key"]) for r in retried] == [("throttled", "x"), ("run", "x")]


@pytest.mark.promise("pause-queue-moves-nothing")
def test_a_paused_queue_runs_nothing_from_the_store_until_resumed(
    app: Celery, redis_server: Any, redis_client: redis.Redis
) -> None:
    settings = {**SETTINGS, "delayq_mover_max_sleep": 30}  # only a wake-up ends a long sleep
    with celery_process("worker", redis_server.url, settings, "-P", "solo", "-Q", "default,other"):
        pause_queue(app, "default")
        send(app, LIMITED, "a", "limited")
        remember(app, "delayed", countdown=0.5)
        remember(app, "straight")  # no countdown, no limit: never kept in the store
        remember(app, "other", countdown=1, queue="other")  # moved by a pass after them
        wait_until(lambda: {r["label"] for r in runs(redis_client)} >= {"straight", "other"})
        assert {r["label"] for r in runs(redis_client)} == {"straight", "other"}
        assert releases(app, LIMITED, "a") == []

        resumed = time.monotonic()
        assert resume_queue(app, "default")
        wait_until(lambda: len(runs(redis_client)) == 4, timeout=20, what="the held two")
        assert time.monotonic() - resumed < 10  # woken, not after its 30 s sleep
    assert len(releases(app, LIMITED, "a")) == 1
