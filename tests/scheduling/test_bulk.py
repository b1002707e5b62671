"""``celery_delayq.schedule_many``: the messages it stores are the ones ``apply_async``
stores, byte for byte (ids aside), on a Redis broker and on RabbitMQ; each chunk is one
atomic call, and a chunk that fails is named with its task ids."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.results import PendingMessage
from celery_delayq.testing import wait_until

from ..helpers import noop_task

pytestmark = pytest.mark.integration

ETA = datetime(2031, 5, 17, 8, 30, 0, 123456, tzinfo=timezone.utc)

#: Arguments of every kind: plain ones (repr'd quickly) and ones only saferepr writes.
CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    ((1, "plain"), {"k": 2.5, "n": None}),
    (("it's", "a\nb", "é"), {}),
    (([1, {"deep": [1, [2, [3, [4]]]]}],), {"b": b"\x00bytes".decode("latin-1")}),
    (("x" * 5000,), {"long": "y" * 3000}),
    ((), {}),
]


def any_args(app: Celery) -> Any:
    """A task that takes any arguments (no worker runs it here)."""

    @app.task(name="tests.any_args", shared=False)
    def any_args(*args: Any, **kwargs: Any) -> None:
        return None

    return any_args


def stored(app: Celery, task_id: str) -> PendingMessage:
    with open_store(app) as store:
        (message,) = store.find(task_id)
        return message


def without_ids(message: PendingMessage) -> tuple[Any, ...]:
    """A stored message with its delivery tag blanked (the task ids are equal)."""
    envelope = json.loads(message.record.payload)
    envelope["properties"].pop("delivery_tag", None)
    return (message.queue, message.due, message.record.destination, envelope)


@pytest.fixture(params=["redis", "amqp"])
def bulk_app(request, make_app, make_amqp_app) -> Iterator[Celery]:
    """An app on a Redis broker, or on RabbitMQ with a store of its own."""
    settings = {"timezone": "Europe/Paris", "task_default_priority": 3}
    yield make_app(**settings) if request.param == "redis" else make_amqp_app(**settings)


def counting_apply_async(task: Any) -> list[str]:
    """Count the task's own apply_async calls: schedule_many makes one per template."""
    calls: list[str] = []
    apply_async = task.apply_async

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("task_id"))
        return apply_async(*args, **kwargs)

    task.apply_async = counted
    return calls


def test_the_messages_are_those_apply_async_sends(bulk_app: Celery) -> None:
    task = any_args(bulk_app)
    applied = counting_apply_async(task)
    for n, (args, kwargs) in enumerate(CALLS):
        for when in ({"eta": ETA}, {"eta": ETA.replace(tzinfo=None)}):
            single = task.apply_async(args, kwargs, task_id=f"single-{n}", **when).id
            many = f"many-{n}"
            # The first call of a shape is apply_async's own; the second is a copy.
            ids = celery_delayq.schedule_many(
                task,
                [
                    (args, kwargs, {**when, "task_id": f"first-{n}"}),
                    (args, kwargs, {**when, "task_id": many}),
                ],
            )
            assert ids == [f"first-{n}", many]
            assert applied[-2:] == [single, f"first-{n}"]  # the second call is a copy
            expected = without_ids(stored(bulk_app, single))
            for task_id in ids:
                copy = json.loads(json.dumps(without_ids(stored(bulk_app, task_id))))
                envelope = copy[3]
                for field in ("id", "root_id"):
                    assert envelope["headers"][field] == task_id
                    envelope["headers"][field] = single
                assert envelope["properties"]["correlation_id"] == task_id
                envelope["properties"]["correlation_id"] = single
                assert copy == json.loads(json.dumps(expected))
            celery_delayq.cancel(bulk_app, single)
            for task_id in ids:
                celery_delayq.cancel(bulk_app, task_id)


def test_countdowns_are_counted_from_each_call_in_the_app_timezone(bulk_app: Celery) -> None:
    task = any_args(bulk_app)
    before = datetime.now(timezone.utc)
    ids = celery_delayq.schedule_many(task, [((i,), {}, {"countdown": 60 + i}) for i in range(300)])
    after = datetime.now(timezone.utc)
    for i in (0, 150, 299):  # a template, a copy in the first chunk, one in the second
        headers = json.loads(stored(bulk_app, ids[i]).record.payload)["headers"]
        eta = datetime.fromisoformat(headers["eta"])
        assert eta.utcoffset() in (timedelta(hours=1), timedelta(hours=2))  # Europe/Paris
        assert before + timedelta(seconds=60 + i) <= eta <= after + timedelta(seconds=60 + i)
        assert headers["argsrepr"] == f"({i},)"
    assert sum(b.pending for b in celery_delayq.backlog(bulk_app)) == 300


def test_a_call_that_is_due_now_is_published_at_once(make_app, redis_client) -> None:
    app = make_app()
    task = any_args(app)
    ids = celery_delayq.schedule_many(
        task, [((1,), {}, {"countdown": 60}), ((2,), {}), ((3,), {}, {"countdown": 60})]
    )
    assert len(ids) == 3 and len(set(ids)) == 3
    assert redis_client.llen("default") == 1  # the one without an ETA
    assert [b.pending for b in celery_delayq.backlog(app)] == [2]


def test_wrong_arguments_fail_as_apply_async_fails_after_storing_the_calls_before(
    make_app,
) -> None:
    app = make_app()

    @app.task(name="tests.one_arg", shared=False)
    def one_arg(x: int) -> int:
        return x

    calls = [((1,), {}, {"countdown": 60, "task_id": f"ok-{i}"}) for i in range(3)]
    with pytest.raises(TypeError):
        celery_delayq.schedule_many(one_arg, [*calls, ((1, 2), {}, {"countdown": 60})])
    assert pending(app) == 3


def test_a_chunk_is_stored_whole_or_not_at_all_and_a_failure_names_it(
    make_app, redis_client: redis.Redis
) -> None:
    """Redis refuses writes (maxmemory) once the first chunk is stored: the error names
    the second chunk's task ids and the first chunk's, which are stored, all of them."""
    app = make_app()
    task = any_args(app)

    def calls() -> Iterator[tuple[Any, ...]]:
        for i in range(250):
            if i == 100:  # the first chunk (0..99) is being stored (by the writer thread)
                wait_until(lambda: pending(app) == 100, what="the first chunk is stored")
                redis_client.config_set("maxmemory", 1)
            yield ((i,), {}, {"countdown": 60, "task_id": f"t{i}"})

    try:
        with pytest.raises(celery_delayq.BulkScheduleError, match="chunk 1") as raised:
            celery_delayq.schedule_many(task, calls(), chunk_size=100)
    finally:
        redis_client.config_set("maxmemory", 0)
    assert raised.value.scheduled == [f"t{i}" for i in range(100)]
    assert raised.value.lost == [f"t{i}" for i in range(100, 200)]
    with open_store(app) as store:
        assert {m.task_id for m in store.pending(limit=1000)} == set(raised.value.scheduled)


def pending(app: Celery) -> int:
    return sum(b.pending for b in celery_delayq.backlog(app))


def test_it_needs_the_delayq_transport(app_factory: Callable[..., Celery], redis_server) -> None:
    app = app_factory(redis_server.url, broker_transport="redis")
    with pytest.raises(celery_delayq.ConfigurationError, match="broker_transport"):
        celery_delayq.schedule_many(noop_task(app), [((1,), {}, {"countdown": 5})])


def script_commands(client: redis.Redis) -> tuple[int, int, int]:
    """EVALSHA calls, EVALSHA calls refused (NOSCRIPT), SCRIPT calls since the reset."""
    stats = client.info("commandstats")
    evalsha = stats.get("cmdstat_evalsha", {})
    script = stats.get("cmdstat_script", {})
    return evalsha.get("calls", 0), evalsha.get("failed_calls", 0), script.get("calls", 0)


def test_a_first_bulk_call_on_a_fresh_redis_loads_its_script_once(
    make_app, redis_client: redis.Redis
) -> None:
    """Three chunks on a Redis that has no script yet (flushed): the first chunk's call
    is refused once (NOSCRIPT), the script loaded once, then each chunk stored in one
    call; a second bulk call loads nothing and is refused nothing."""
    app = make_app()
    task = any_args(app)
    redis_client.config_resetstat()
    celery_delayq.schedule_many(task, [((i,), {}, {"countdown": 60}) for i in range(450)])
    assert script_commands(redis_client) == (3 + 1, 1, 1)
    redis_client.config_resetstat()
    celery_delayq.schedule_many(task, [((i,), {}, {"countdown": 60}) for i in range(450)])
    assert script_commands(redis_client) == (3, 0, 0)
    assert pending(app) == 900


def test_a_bulk_call_stores_on_the_producers_pooled_connection(
    make_app, redis_client: redis.Redis
) -> None:
    """The store factory opens bulk's store on the producer's own connection and pool (as
    open_store's for a page): a second call opens no Redis connection."""
    app = make_app()
    task = any_args(app)
    calls = [((i,), {}, {"countdown": 60}) for i in range(10)]
    celery_delayq.schedule_many(task, calls)
    before = redis_client.info("stats")["total_connections_received"]
    celery_delayq.schedule_many(task, calls)
    assert redis_client.info("stats")["total_connections_received"] == before
    assert pending(app) == 20
