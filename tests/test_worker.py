"""End to end with real Celery workers (and beat) as subprocesses on a real Redis."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

import celery_delayq
from celery_delayq.record import task_key

from .conftest import celery_process, runs, wait_for

pytestmark = pytest.mark.timeout(120)


REMEMBER = "tests.worker_app.remember"


def remember(app: Celery, label: str, **options):
    return app.send_task(REMEMBER, (label,), **options)


def test_no_delayed_message_reaches_a_worker_before_its_eta(make_app, redis_server, redis_client):
    app = make_app()
    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        sent = [remember(app, f"c{c}", countdown=c) for c in (0.3, 0.6, 1.0, 1.5, 2.0)]
        eta = datetime.now(timezone.utc) + timedelta(seconds=1.2)
        sent.append(remember(app, "eta", eta=eta))
        wait_for(lambda: len(runs(redis_client)) == len(sent), timeout=20)

    for run in runs(redis_client):
        eta_seconds = datetime.fromisoformat(run["eta"]).timestamp()
        assert run["at"] >= eta_seconds, f"{run['label']} started before its ETA"
        assert run["at"] - eta_seconds < 2.0, f"{run['label']} started far too late"
    assert sorted(r["id"] for r in runs(redis_client)) == sorted(s.id for s in sent)


@pytest.mark.parametrize("transport", ["celery_delayq.transport:Transport", "redis"])
def test_a_countdown_longer_than_visibility_timeout_runs_exactly_once(
    make_app, redis_server, redis_client, transport
):
    """Two workers, ETA beyond the visibility timeout: vanilla (the control) runs tasks
    more than once, because kombu restores the unacked ETA message to the other worker."""
    options = {"visibility_timeout": 1, "unacked_restore_interval": 1,
               "unacked_restore_throttle": 1}  # fmt: skip
    settings = {"broker_transport_options": options, "broker_transport": transport}
    app = make_app(**settings)
    worker_args = ("worker", redis_server.url, settings, "-P", "solo")
    with celery_process(*worker_args, "-n", "w1@%h"), celery_process(*worker_args, "-n", "w2@%h"):
        sent = [remember(app, str(i), countdown=4) for i in range(20)]
        wait_for(lambda: len(runs(redis_client)) >= 20, timeout=20)
        time.sleep(3)  # time for any redelivery to show up

    executions = Counter(r["id"] for r in runs(redis_client))
    if transport == "redis":
        assert sum(executions.values()) > 20, "the control should show vanilla's duplicates"
    else:
        assert executions == Counter(s.id for s in sent)


def test_a_retry_with_countdown_goes_through_the_store(make_app, redis_server, redis_client):
    app = make_app()
    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        result = app.send_task("tests.worker_app.retry_once", (2,))
        wait_for(lambda: runs(redis_client))
        # The retry (same task id) now waits in Redis, not in the worker.
        wait_for(lambda: celery_delayq.backlog(app)[0].pending == 1)
        assert redis_client.hexists("delayq:{default}:msg", task_key(result.id))
        wait_for(lambda: len(runs(redis_client)) == 2, timeout=10)

    first, second = runs(redis_client)
    assert [first["retries"], second["retries"]] == [0, 1]
    assert second["at"] - first["at"] >= 2.0
    assert second["at"] >= datetime.fromisoformat(second["eta"]).timestamp()


def test_autoretry_backoff_goes_through_the_store(make_app, redis_server, redis_client):
    app = make_app()
    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        result = app.send_task("tests.worker_app.flaky")
        wait_for(lambda: len(runs(redis_client)) == 3, timeout=15)

    attempts = runs(redis_client)
    assert [a["retries"] for a in attempts] == [0, 1, 2]
    assert {a["id"] for a in attempts} == {result.id}
    gaps = [later["at"] - earlier["at"] for earlier, later in zip(attempts, attempts[1:])]
    assert gaps[0] >= 1.0 and gaps[1] >= 2.0  # the backoff countdowns were honoured
    for attempt in attempts[1:]:
        assert attempt["at"] >= datetime.fromisoformat(attempt["eta"]).timestamp()


def test_cancel_keeps_a_task_from_ever_running_and_reschedule_moves_one(
    make_app, redis_server, redis_client
):
    app = make_app()
    cancelled = remember(app, "cancelled", countdown=1)
    earlier = remember(app, "earlier", countdown=3600)
    assert celery_delayq.cancel(app, cancelled.id) == 1
    assert celery_delayq.reschedule(app, earlier.id, countdown=0.5) == 1

    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        wait_for(lambda: runs(redis_client), timeout=10)
        time.sleep(1.5)

    (run,) = runs(redis_client)
    assert run["label"] == "earlier"
    # The rewritten ETA header is what the worker saw, so it did not wait for the old one.
    assert datetime.fromisoformat(run["eta"]) < datetime.now(timezone.utc)
    assert celery_delayq.cancel(app, earlier.id) == 0  # already delivered


def test_beat_scheduler_runs_periodic_entries_and_the_mover(make_app, redis_server, redis_client):
    settings = {
        "delayq_worker_mover": False,
        "beat_schedule": {"tick": {"task": "tests.worker_app.remember", "schedule": 0.5,
                                   "args": ["periodic"]}},
    }  # fmt: skip
    app = make_app()
    with celery_process("worker", redis_server.url, settings, "-P", "solo"):
        delayed = remember(app, "delayed", countdown=0.5)
        time.sleep(1.5)
        assert runs(redis_client) == [], "the worker's own mover is off"
        with celery_process("beat", redis_server.url, settings, "-S", "delayq",
                            ready="beat: Starting"):  # fmt: skip
            wait_for(lambda: {"delayed", "periodic"} <= {r["label"] for r in runs(redis_client)})

    labels = Counter(r["label"] for r in runs(redis_client))
    assert labels["delayed"] == 1
    assert labels["periodic"] >= 1
    assert [r["id"] for r in runs(redis_client) if r["label"] == "delayed"] == [delayed.id]


def test_priorities_and_global_keyprefix_are_respected_end_to_end(
    make_app, redis_server, redis_client
):
    options = {"global_keyprefix": "tenant:", "priority_steps": [0, 3, 6, 9]}
    settings = {"broker_transport_options": options, "task_queue_max_priority": 9}
    app = make_app(**settings)
    remember(app, "urgent", countdown=0.5, priority=9)
    remember(app, "plain", countdown=0.5)
    assert redis_client.hlen("tenant:delayq:{default}:msg") == 2

    with celery_process("worker", redis_server.url, settings, "-P", "solo"):
        wait_for(lambda: len(runs(redis_client)) == 2, timeout=15)

    assert {r["label"] for r in runs(redis_client)} == {"urgent", "plain"}
    assert redis_client.keys("delayq*") == []


def test_a_worker_logs_where_the_store_is_and_warns_about_risky_redis_settings(redis_server):
    with celery_process("worker", redis_server.url, {}, "-P", "solo") as worker:
        wait_for(lambda: "persistence" in "".join(worker.output), timeout=10)
    log = "".join(worker.output)
    assert f"celery-delayq: delayed tasks in {redis_server.url} under key prefix 'delayq'" in log
    assert "this worker moves due messages" in log
    assert "no persistence: a Redis restart loses every pending delayed task" in log


def test_a_worker_without_mover_says_who_must_move(redis_server):
    settings = {"delayq_worker_mover": False}
    with celery_process("worker", redis_server.url, settings, "-P", "solo") as worker:
        pass
    assert "worker mover off (delayq_worker_mover)" in "".join(worker.output)


def test_a_worker_keeps_consuming_while_its_mover_drains_a_large_backlog(
    make_app, redis_server, redis_client
):
    """The mover has its own thread and connections: tasks keep running while it moves
    250,000 due messages (to a queue this worker does not consume)."""
    from celery_delayq.keys import KeySpace
    from celery_delayq.store import DelayedStore

    store = DelayedStore(redis_client, KeySpace(), 500)
    later = store.server_time_ms() + 3_600_000
    with redis_client.pipeline(transaction=False) as pipe:
        for i in range(250_000):
            call = store.schedule_call(queue="bulk", message_id=f"m{i}", task_id=None,
                                       due_ms=later, destination="bulk", payload=b"x")  # fmt: skip
            store.scripts.schedule(keys=call.keys, args=call.args, client=pipe)
        pipe.execute()
    app = make_app()
    with celery_process("worker", redis_server.url, {}, "-P", "solo", "-Q", "default"):
        keys = store.keys.for_queue("bulk")
        for page in [keys.pages, *(keys.page(p) for p in redis_client.zrange(keys.pages, 0, -1))]:
            redis_client.zunionstore(page, {page: 0})  # weight 0: every message is due now
        redis_client.publish(store.keys.wakeup_channel, 0)  # wake the sleeping mover
        sent = [remember(app, str(i)) for i in range(5)]
        wait_for(lambda: len(runs(redis_client)) == 5, timeout=10)
        drained_when_tasks_ran = redis_client.llen("bulk")
        wait_for(lambda: redis_client.llen("bulk") == 250_000, timeout=60)

    assert sorted(r["id"] for r in runs(redis_client)) == sorted(s.id for s in sent)
    assert drained_when_tasks_ran < 250_000, "the tasks ran only after the whole backlog moved"
