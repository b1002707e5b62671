"""Holds on flow control's releases (celery_delayq/ops/pause.py, lua/gate_hold.lua) on a
real redis-server, the moves run in the test: a pause releases nothing until resumed,
a throttle never shortens a longer hold, a paused bucket's state never expires, a paused
queue moves nothing, and hostile task names and keys touch no key outside their bucket."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery

from celery_delayq import (
    pause,
    pause_queue,
    reschedule,
    resume,
    resume_queue,
    throttle,
    throttle_current,
)
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.gates import (
    MOST_KEY_BYTES,
    InvalidLimit,
    bucket_of,
    bucket_shard_key,
    split_bucket,
)
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import wait_until
from celery_delayq.testing.releases import release_log

from ..helpers import take_all

pytestmark = pytest.mark.integration

LIMITED = "tests.flow.limited"
#: 2/s: a bucket's first message goes at once, the next about half a second later.
SETTINGS: dict[str, Any] = {"delayq_rate_limits": {LIMITED: "2/s"}}


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app(**SETTINGS)


def send(app: Celery, key: str | None = None, **options: Any) -> None:
    headers = {} if key is None else {"delayq_limit_key": key}
    app.send_task(LIMITED, headers=headers, **options)


def shard(app: Celery, key: str | None, queue: str = "default") -> QueueKeys:
    """The shard of ``queue`` that holds the bucket of ``LIMITED`` (and ``key``)."""
    with open_store(app) as store:
        return store.keys.shard_of(queue, bucket_shard_key(bucket_of(LIMITED, key)))


def released(app: Celery, queue: str = "default") -> list[str]:
    """The buckets of the releases in the release log, oldest first."""
    with open_store(app) as store:
        log: dict[str, list[int]] = {}
        for keys in store.keys.shards_of(queue):
            log.update(release_log(store.client, keys))
    return [bucket for _, bucket in sorted((at, b) for b, times in log.items() for at in times)]


def move(app: Celery) -> int:
    with open_store(app) as store:
        return store.move_all_due().moved


def score(app: Celery, key: str | None) -> float | None:
    keys = shard(app, key)
    with open_store(app) as store:
        found = store.client.zscore(f"{keys.gates}ready", bucket_of(LIMITED, key))
    return None if found is None else float(found)


@pytest.mark.promise("pause-releases-nothing")
def test_a_paused_key_releases_nothing_until_resumed_and_its_other_keys_go_on(
    app: Celery,
) -> None:
    pause(app, LIMITED, key="a")  # before its first message: no queue is known yet
    for _ in range(3):
        send(app, "a")
    send(app, "b")
    move(app)
    move(app)
    assert released(app) == [bucket_of(LIMITED, "b")]
    assert score(app, "a") == float("inf")

    hold = resume(app, LIMITED, key="a")
    assert (hold.paused, hold.until_us, hold.waiting) == (False, None, 3)
    assert score(app, "a") is not None and score(app, "a") < float("inf")
    move(app)
    assert released(app) == [bucket_of(LIMITED, "b"), bucket_of(LIMITED, "a")]


@pytest.mark.promise("pause-holds-later-messages")
def test_a_pause_holds_in_the_tasks_routed_queue_before_its_first_message(
    make_app: Callable[..., Celery],
) -> None:
    app = make_app(**SETTINGS, task_routes={LIMITED: {"queue": "elsewhere"}})
    pause(app, LIMITED)
    send(app)
    move(app)
    assert released(app, "elsewhere") == []
    assert resume(app, LIMITED).waiting == 1
    move(app)
    assert released(app, "elsewhere") == [LIMITED]


@pytest.mark.promise("throttle-never-shortens")
def test_a_throttle_holds_for_its_time_and_never_shortens_a_longer_hold_or_a_pause(
    app: Celery,
) -> None:
    send(app, "a")
    move(app)  # the first goes at once
    send(app, "a")
    move(app)
    with open_store(app) as store:
        before = store.server_time_ms() * 1000
    long = throttle(app, LIMITED, 60, key="a")
    assert long.until_us is not None and long.until_us >= before + 60_000_000
    assert throttle(app, LIMITED, 1, key="a").until_us == long.until_us  # not shortened
    assert score(app, "a") == long.until_us
    move(app)
    assert released(app) == [bucket_of(LIMITED, "a")]

    assert pause(app, LIMITED, key="a").paused
    assert throttle(app, LIMITED, 120, key="a").paused  # a throttle never ends a pause
    assert score(app, "a") == float("inf")

    resume(app, LIMITED, key="a")
    short = throttle(app, LIMITED, 0.3, key="a")
    assert short.until_us is not None
    allowed = score(app, "a")  # the throttle's end, or the rate's next slot if later
    assert allowed is not None and allowed >= short.until_us
    with open_store(app) as store:
        wait_until(lambda: store.server_time_ms() * 1000 > allowed, what="its end")
    move(app)
    assert released(app) == [bucket_of(LIMITED, "a")] * 2


def a_day(ttl_ms: int) -> bool:
    """Whether a bucket state's time to live is a day after it stops mattering (its rate's
    next slot, half a second on at most), or up to the hour more its index member lasts
    (lua/gates.lua's INDEX_SLACK)."""
    return 86_400_000 - 1_000 <= ttl_ms <= 86_400_000 + 3_600_000 + 500


@pytest.mark.promise("pause-never-expires")
def test_a_paused_buckets_state_never_expires_and_a_throttled_ones_outlives_its_hold(
    app: Celery,
) -> None:
    send(app, "a")
    move(app)
    keys = shard(app, "a")
    state = keys.gate("s", bucket_of(LIMITED, "a"))
    with open_store(app) as store:
        client = store.client
        assert a_day(client.pttl(state))  # a day after it stops mattering
        pause(app, LIMITED, key="a")
        assert client.pttl(state) == -1
        send(app, "a")  # its entry into the bucket saves the state again
        move(app)
        assert client.pttl(state) == -1
        assert client.hget(state, "hold") == b"paused"
        resume(app, LIMITED, key="a")
        assert a_day(client.pttl(state))
        throttle(app, LIMITED, 3 * 86400, key="a")
        assert client.pttl(state) > 3 * 86_400_000


@pytest.mark.promise("pause-queue-moves-nothing")
def test_a_paused_queue_moves_nothing_and_resumes(app: Celery) -> None:
    remember = "tests.flow.unlimited"
    pause_queue(app, "default")
    send(app, "a")
    app.send_task(remember, countdown=0.2)
    app.send_task(remember)  # no countdown, no limit: straight to the broker, as ever
    with open_store(app) as store:
        own_list = store.keys.for_queue("default").own_list
        due_after = store.server_time_ms() + 300
        wait_until(lambda: store.server_time_ms() > due_after, what="the countdown is over")
        assert store.move_all_due().moved == 0
        assert store.client.llen(own_list) == 1
        assert store.queue_paused("default")
        assert resume_queue(app, "default") is True
        assert resume_queue(app, "default") is False
        # the delayed one, and the limited one, in its bucket since its publish, released
        assert store.move_all_due().moved == 2
        assert store.client.llen(own_list) == 3
    assert released(app) == [bucket_of(LIMITED, "a")]


def test_holds_reach_a_sharded_queues_bucket(make_app: Callable[..., Celery]) -> None:
    app = make_app(**SETTINGS, delayq_store_shards=8)
    keys = {f"k{i}" for i in range(6)}  # several shards
    for key in keys:
        pause(app, LIMITED, key=key)
        send(app, key)
    move(app)
    assert released(app) == []
    for key in keys:
        assert resume(app, LIMITED, key=key).waiting == 1
    move(app)
    assert sorted(released(app)) == sorted(bucket_of(LIMITED, key) for key in keys)


HOSTILE = [
    "}{x}",
    "\r\n*3\r\n$3\r\nDEL\r\n",
    "../../queues",
    "x" * MOST_KEY_BYTES,
    "\udcff\x00\x01",
    "delayq:queues",
]


@pytest.mark.parametrize("key", HOSTILE)
def test_hostile_keys_touch_nothing_outside_their_bucket(app: Celery, key: str) -> None:
    assert split_bucket(bucket_of(LIMITED, key)) == (LIMITED, key)
    send(app, "ok")
    move(app)
    with open_store(app) as store:
        before = {name: store.client.type(name) for name in store.client.keys("*")}
        pause(app, LIMITED, key=key)
        throttle(app, LIMITED, 5, key=key)
        resume(app, LIMITED, key=key)
        pause(app, LIMITED, key=key)
        after = {name: store.client.type(name) for name in store.client.keys("*")}
        new = set(after) - set(before)
        state = shard(app, key).gate("s", bucket_of(LIMITED, key))
        assert new == {state.encode("utf-8", "surrogatepass")}
        assert {name: after[name] for name in before} == before
        assert store.client.hget(state.encode("utf-8", "surrogatepass"), "hold") == b"paused"


def test_refused_names_and_lengths(app: Celery) -> None:
    for task in ("", f"{LIMITED}\x00a"):
        with pytest.raises(ValueError, match="not a task name"):
            pause(app, task)
    with pytest.raises(InvalidLimit, match="at most"):
        pause(app, LIMITED, key="x" * (MOST_KEY_BYTES + 1))
    for seconds in (-1, float("nan"), float("inf"), 31 * 86400):
        with pytest.raises(ValueError, match="a throttle lasts"):
            throttle(app, LIMITED, seconds)
    with pytest.raises(TypeError):
        throttle(app, LIMITED, "5")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="inside a running task"):
        throttle_current(5)


@pytest.mark.promise("pause-queue-moves-nothing")
def test_a_paused_queue_hands_nothing_to_rabbitmq(make_amqp_app: Callable[..., Celery]) -> None:
    """The hand-over to another broker (claim, publish, ack) claims nothing from a paused
    queue; a message sent without a countdown still goes straight to RabbitMQ."""
    app = make_amqp_app()
    queue = app.conf.task_default_queue
    pause_queue(app, queue)
    sent = app.send_task("tests.flow.unlimited", countdown=3600)
    assert reschedule(app, sent.id, countdown=-1) == 1  # due now, by the store's clock
    app.send_task("tests.flow.unlimited")  # straight to RabbitMQ
    assert deliver_all_due(app) == 0
    assert len(take_all(app, queue)) == 1

    assert resume_queue(app, queue)
    assert deliver_all_due(app) == 1
    (message,) = take_all(app, queue)
    assert message.headers["id"] == sent.id
