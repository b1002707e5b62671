"""Delay keys (debounce, keep, reject) through a real publish, on a Redis broker (the
same-Redis move) and on RabbitMQ (claim -> publish -> ack); no worker: the store and the
queues are read directly. Worker runs are in tests/scheduling/test_keyed_worker.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery
from kombu.utils.json import loads

import celery_delayq
import celery_delayq.ops.api
from celery_delayq import DelayKeyHeld, InvalidDelayKey
from celery_delayq.brokers.common.message import describe
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.results import PendingMessage

from ..helpers import invoke, noop_task

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "amqp"])
def keyed_app(request, make_app, make_amqp_app) -> Iterator[Celery]:
    yield make_app() if request.param == "redis" else make_amqp_app()


def pending(app: Celery) -> list[PendingMessage]:
    with open_store(app) as store:
        return store.pending(limit=1000)


def args_of(message: PendingMessage) -> Any:
    return describe(message.record.payload)["args"]


def counters(app: Celery) -> dict[str, int]:
    with open_store(app) as store:
        return store.stats(app.conf.task_default_queue)


def move_all(app: Celery) -> int:
    with open_store(app) as store:
        return store.move_all_due().moved


def test_replace_keeps_the_last_payload_and_restarts_the_timer(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    first = celery_delayq.debounce(task, (1,), key="user:42", countdown=600)
    second = celery_delayq.debounce(task, (2,), key="user:42", countdown=900)
    third = celery_delayq.debounce(task, (3,), key="user:42", countdown=1200)

    assert (first.outcome, second.outcome, third.outcome) == ("scheduled", "replaced", "replaced")
    assert second.replaced_id == first.id and third.replaced_id == second.id
    (message,) = pending(keyed_app)
    assert message.task_id == third.id
    assert args_of(message) == "(3,)"
    assert message.due == pytest.approx(third.due)
    assert third.due - first.due == pytest.approx(600, abs=5)  # the timer restarted
    assert counters(keyed_app)["replaced"] == 2


def test_max_wait_caps_how_far_replacing_pushes_the_due_time(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    first = celery_delayq.debounce(task, (1,), key="k", countdown=600, max_wait=60)
    second = celery_delayq.debounce(task, (2,), key="k", countdown=600, max_wait=60)

    # the first's due time is capped at its own schedule time + 60 s, and the replace
    # keeps that cap: max_wait counts from the first pending message of the key
    assert second.outcome == "replaced"
    assert second.due == first.due
    (message,) = pending(keyed_app)
    assert message.due == first.due and args_of(message) == "(2,)"
    # the payload's ETA is the capped due time, or a worker would hold the task until
    # 600 s after the call, whatever max_wait said
    eta = describe(message.record.payload)["eta"]
    assert datetime.fromisoformat(eta) == datetime.fromtimestamp(first.due, timezone.utc)


@pytest.mark.parametrize(
    "due",
    [
        datetime(2031, 12, 31, 23, 59, 59, 999000, timezone.utc),  # a year's last ms
        datetime(2028, 2, 29, 23, 59, 59, 999000, timezone.utc),  # a leap day's last ms
        datetime(2100, 3, 1, 0, 0, 0, 1000, timezone.utc),  # 2100 is no leap year
        datetime(2027, 1, 1, 0, 0, tzinfo=timezone.utc),
    ],
)
def test_a_capped_eta_is_spelled_exactly_on_any_date(make_app, due: datetime) -> None:
    """The script writes the capped ETA itself (an ISO 8601 date from epoch ms)."""
    app = make_app()
    task = noop_task(app)
    wait = due.timestamp() - time.time()
    result = celery_delayq.debounce(task, (1,), key="k", countdown=wait + 3600, max_wait=wait)

    (message,) = pending(app)
    eta = describe(message.record.payload)["eta"]
    assert abs(datetime.fromisoformat(eta) - due) < timedelta(seconds=1)
    assert datetime.fromisoformat(eta) == datetime.fromtimestamp(result.due, timezone.utc)


def test_keep_drops_the_new_message_and_names_the_pending_task(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    first = celery_delayq.schedule_keyed(task, (1,), key="k", on_held="keep", countdown=600)
    second = celery_delayq.schedule_keyed(task, (2,), key="k", on_held="keep", countdown=5)

    assert first.outcome == "scheduled" and not first.dropped
    assert second.outcome == "kept" and second.dropped
    assert second.id == first.id  # the caller holds the task that will run
    (message,) = pending(keyed_app)
    assert message.task_id == first.id and args_of(message) == "(1,)"
    assert counters(keyed_app)["dropped"] == 1


def test_reject_raises_naming_the_pending_task_and_changes_nothing(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    first = celery_delayq.schedule_keyed(task, (1,), key="k", on_held="reject", countdown=600)
    with pytest.raises(DelayKeyHeld, match=first.id) as raised:
        celery_delayq.schedule_keyed(task, (2,), key="k", on_held="reject", countdown=600)

    assert raised.value.pending_id == first.id
    assert [m.task_id for m in pending(keyed_app)] == [first.id]
    assert counters(keyed_app)["refused"] == 1


def test_keys_are_per_key_and_unkeyed_messages_are_untouched(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    plain = task.apply_async((0,), countdown=600)
    a = celery_delayq.debounce(task, (1,), key="a", countdown=600)
    b = celery_delayq.debounce(task, (2,), key="b", countdown=600)
    assert (a.outcome, b.outcome) == ("scheduled", "scheduled")
    assert {m.task_id for m in pending(keyed_app)} == {plain.id, a.id, b.id}


def test_the_key_is_released_when_the_message_is_moved(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    first = celery_delayq.schedule_keyed(task, (1,), key="k", on_held="keep", countdown=0)
    assert first.outcome == "scheduled"  # keyed: kept in the store even when due at once
    assert move_all(keyed_app) == 1  # by the same-Redis move, or claimed, published, acked

    again = celery_delayq.schedule_keyed(task, (2,), key="k", on_held="keep", countdown=600)
    assert again.outcome == "scheduled" and again.id != first.id


def test_the_key_is_released_by_cancel_revoke_and_purge(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    keep = {"key": "k", "on_held": "keep", "countdown": 600}
    first = celery_delayq.schedule_keyed(task, (1,), **keep)
    assert celery_delayq.cancel(keyed_app, first.id) == 1
    second = celery_delayq.schedule_keyed(task, (2,), **keep)
    assert second.outcome == "scheduled"

    keyed_app.control.revoke(second.id)
    third = celery_delayq.schedule_keyed(task, (3,), **keep)
    assert third.outcome == "scheduled"

    if keyed_app.conf.broker_url.startswith("redis"):  # celery purge empties the store too
        with keyed_app.connection_for_write() as connection:
            connection.default_channel.queue_purge(keyed_app.conf.task_default_queue)
    else:
        celery_delayq.ops.api.purge(keyed_app)
    fourth = celery_delayq.schedule_keyed(task, (4,), **keep)
    assert fourth.outcome == "scheduled"
    assert [m.task_id for m in pending(keyed_app)] == [fourth.id]


def test_list_and_show_name_the_key(app: Celery) -> None:
    task = noop_task(app)
    keyed = celery_delayq.debounce(task, (1,), key="user:42", countdown=600)
    task.apply_async((2,), countdown=700)

    listed = loads(invoke(app, "list", "--json").output)
    assert [m["key"] for m in listed] == ["user:42", None]
    assert "user:42" in invoke(app, "list").output
    (shown,) = loads(invoke(app, "show", keyed.id, "--json").output)
    assert shown["key"] == "user:42" and shown["id"] == keyed.id


@pytest.mark.parametrize("on_held", ["replace", "keep"])
def test_racing_publishers_leave_exactly_one_pending_message(
    keyed_app: Celery, on_held: str
) -> None:
    task = noop_task(keyed_app)
    results: list[Any] = []
    start = threading.Barrier(4)

    def publish(thread: int) -> None:
        start.wait()
        for n in range(25):
            results.append(
                celery_delayq.schedule_keyed(
                    task, (thread, n), key="hot", on_held=on_held, countdown=600
                )
            )

    threads = [threading.Thread(target=publish, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    (message,) = pending(keyed_app)
    outcomes = [r.outcome for r in results]
    assert outcomes.count("scheduled") == 1
    stats = counters(keyed_app)
    if on_held == "replace":
        assert outcomes.count("replaced") == 99 == stats["replaced"]
        # every replaced id is distinct: a chain through all 100 messages
        assert len({r.replaced_id for r in results if r.replaced_id}) == 99
    else:
        assert outcomes.count("kept") == 99 == stats["dropped"]
        assert {r.id for r in results} == {message.task_id}


def test_a_retry_is_stored_without_its_key(keyed_app: Celery) -> None:
    """A task retrying itself must not replace (or be dropped for) a newer message of
    its own key: retries carry Celery's ``retries`` header, and go unkeyed."""
    task = noop_task(keyed_app)
    newer = celery_delayq.debounce(task, (2,), key="k", countdown=600)
    retry = task.apply_async(
        (1,), countdown=60, retries=1, headers={"delayq_key": "k", "delayq_on_held": "keep"}
    )
    assert {m.task_id for m in pending(keyed_app)} == {newer.id, retry.id}


def test_bad_key_headers_are_refused_before_anything_is_stored(keyed_app: Celery) -> None:
    task = noop_task(keyed_app)
    with pytest.raises(InvalidDelayKey, match="on a held delay key"):
        task.apply_async((1,), countdown=60, headers={"delayq_key": "k", "delayq_on_held": "x"})
    with pytest.raises(InvalidDelayKey, match="max_wait"):
        task.apply_async((1,), countdown=60, headers={"delayq_key": "k", "delayq_max_wait": "?"})
    with pytest.raises(ValueError, match="countdown or an eta"):
        celery_delayq.debounce(task, (1,), key="k", countdown=None)  # type: ignore[arg-type]
    assert pending(keyed_app) == []


def test_keyed_messages_are_refused_by_schedule_many(app: Celery) -> None:
    task = noop_task(app)
    with pytest.raises(InvalidDelayKey, match="schedule_many"):
        celery_delayq.schedule_many(
            task, [((1,), {}, {"countdown": 60, "headers": {"delayq_key": "k"}})]
        )
    assert pending(app) == []
