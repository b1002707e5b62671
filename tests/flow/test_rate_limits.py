"""Rate limits held at release (config/limits.py, lua/gates.lua), through a real publish
on a real Redis: the store's moves are driven by the test, then by a real worker's mover.

The bound is checked on the store's own release log, by the Redis clock: it holds however
late a move call comes, so these checks do not depend on the machine's speed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.config.errors import ConfigurationError
from celery_delayq.config.settings import config_of
from celery_delayq.core.layout.gates import InvalidLimit, Rate, bucket_of
from celery_delayq.testing.redis_server import RedisServer
from celery_delayq.testing.releases import most_in_window, release_log
from celery_delayq.testing.waiting import wait_until

from ..helpers import celery_process, runs

pytestmark = pytest.mark.integration

LIMITED = "tests.flow.limited"
FREE = "tests.flow.free"
SECOND_US = 1_000_000


def limited_app(make_app: Callable[..., Celery], **settings: object) -> Celery:
    """An app whose task LIMITED (sent by name) is limited to 20/s unless ``settings``
    say otherwise."""
    return make_app(**{"delayq_rate_limits": {LIMITED: "20/s"}, **settings})


def move_until(app: Celery, client: redis.Redis, count: int, timeout: float = 20.0) -> None:
    """Run moves as a mover would, until ``count`` messages are in the default queue."""
    with open_store(app) as store:

        def moved_all() -> bool:
            store.move_all_due()
            return client.llen("default") >= count

        wait_until(moved_all, timeout=timeout, interval=0.002, what=f"{count} messages moved")


def releases(app: Celery, client: redis.Redis) -> dict[str, list[int]]:
    with open_store(app) as store:
        return release_log(client, store.keys.for_queue("default"))


def test_a_limited_task_waits_in_the_store_and_is_released_within_its_rate(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = limited_app(make_app)
    for n in range(45):
        app.send_task(LIMITED, (n,))
    app.send_task(FREE, (0,))

    assert client_list(redis_client) == 1, "only the unlimited task goes to the queue at once"
    move_until(app, redis_client, 46)

    times = releases(app, redis_client)[LIMITED]
    assert len(times) == 45
    assert most_in_window(times, SECOND_US) <= 20
    # evenly spaced (no burst): no two releases closer than the interval less its
    # catch-up (a release the mover made late by up to the catch-up keeps its place)
    rate = Rate.parse("20/s")
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    assert min(gaps) >= rate.interval_us() - rate.catch_up_us()


def client_list(client: redis.Redis) -> int:
    return int(client.llen("default"))


def test_each_limit_key_has_its_own_bucket_and_a_backlog_does_not_delay_another_key(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = limited_app(make_app, delayq_rate_limits={LIMITED: "2/s"})
    for n in range(200):
        app.send_task(LIMITED, (n,), headers={"delayq_limit_key": "busy"})
    with open_store(app) as store:
        store.move_all_due()  # "busy" releases its first; 199 wait in its bucket
        app.send_task(LIMITED, (0,), headers={"delayq_limit_key": "quiet"})
        app.send_task(LIMITED, (0,))  # no key: the task's own bucket
        store.move_all_due()
    assert client_list(redis_client) == 3, "each other bucket's first message went at once"

    move_until(app, redis_client, 6, timeout=10)
    log = releases(app, redis_client)
    busy = log[bucket_of(LIMITED, "busy")]
    assert most_in_window(busy, SECOND_US) <= 2
    assert len(log[bucket_of(LIMITED, "quiet")]) == len(log[LIMITED]) == 1


def test_several_rates_all_hold(make_app: Callable[..., Celery], redis_client: redis.Redis) -> None:
    app = limited_app(make_app, delayq_rate_limits={LIMITED: ["50/s", "8/s"]})
    for n in range(20):
        app.send_task(LIMITED, (n,))
    move_until(app, redis_client, 20)
    times = releases(app, redis_client)[LIMITED]
    assert most_in_window(times, SECOND_US) <= 8
    assert most_in_window(times, SECOND_US // 50) <= 1


def test_a_limited_message_with_a_countdown_waits_for_its_eta_then_for_its_limit(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    app = limited_app(make_app)
    sent = time.time()
    app.send_task(LIMITED, (1,), countdown=1)
    move_until(app, redis_client, 1)
    (released,) = releases(app, redis_client)[LIMITED]
    assert released / SECOND_US >= sent + 1 - 0.05  # the move-ahead at most


def test_a_bad_limit_is_refused_at_start_and_a_stray_limit_key_at_publish(
    make_app: Callable[..., Celery],
) -> None:
    with pytest.raises(ConfigurationError, match="10 per second"):
        config_of(make_app(delayq_rate_limits={LIMITED: "10 per second"}))
    with pytest.raises(ConfigurationError, match="concurrency limit"):
        config_of(make_app(delayq_concurrency_limits={LIMITED: 0}))
    app = limited_app(make_app)
    with pytest.raises(InvalidLimit, match="has no rate or concurrency limit"):
        app.send_task(FREE, (1,), headers={"delayq_limit_key": "k"})


def test_a_real_worker_runs_a_limited_backlog_once_each_within_the_rate(
    redis_server: RedisServer, redis_client: redis.Redis, make_app: Callable[..., Celery]
) -> None:
    task = "tests.worker_app.remember"
    settings = {"delayq_rate_limits": {task: "5/s"}}
    app = make_app(**settings)
    with celery_process("worker", redis_server.url, settings, "-c", "2"):
        ids = [app.send_task(task, (f"n{n}",)).id for n in range(15)]
        wait_until(lambda: len(runs(redis_client)) >= 15, timeout=30, what="15 runs")
    assert sorted(run["id"] for run in runs(redis_client)) == sorted(ids)
    with open_store(app) as store:
        times = release_log(redis_client, store.keys.for_queue("default"))[task]
    assert len(times) == 15
    assert most_in_window(times, SECOND_US) <= 5
