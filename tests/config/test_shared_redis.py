"""Two apps on one Redis under different ``delayq_key_prefix``es, as the production guide
says (Several apps on one Redis): separate delayed stores, shared queue lists. (Apps with
different ``global_keyprefix``es share nothing: tests/config/test_security.py.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.testing import RedisServer, wait_until

from ..helpers import celery_process, invoke, remember, runs, standalone_mover

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

A, B = {"delayq_key_prefix": "dqa"}, {"delayq_key_prefix": "dqb"}


def send(app: Celery, label: str, **options: Any) -> Any:
    """Sent far ahead (a countdown that ran out before the publish would bypass the
    store), on a connection of its own (two apps in one process share kombu's pool)."""
    return remember(app, label, own_connection=True, countdown=600, **options)


def listed(app: Celery) -> set[str]:
    app.set_current()
    return {m["id"] for m in json.loads(invoke(app, "list", "--json").output)}


@pytest.mark.promise("prefixes-delayq-stores-apart")
def test_apps_with_different_delayq_key_prefixes_never_touch_each_others_delayed_tasks(
    make_app: Callable[..., Celery],
) -> None:
    a, b = make_app(**A), make_app(**B)
    a_task = send(a, "a")
    b_task, b_other = send(b, "b"), send(b, "b other", queue="other")

    assert listed(a) == {a_task.id}
    assert listed(b) == {b_task.id, b_other.id}
    a.set_current()
    assert invoke(a, "cancel", b_task.id).exit_code == 1
    assert celery_delayq.reschedule(a, b_task.id, countdown=0) == 0
    assert celery_delayq.promote(a, [b_task.id]) == {b_task.id: 0}
    assert json.loads(invoke(a, "purge", "--yes", "--json").output) == {"default": 1}

    assert listed(a) == set()
    assert listed(b) == {b_task.id, b_other.id}
    assert [(q.queue, q.pending, q.overdue) for q in celery_delayq.backlog(b)] == [
        ("default", 1, 0),
        ("other", 1, 0),
    ]


@pytest.mark.slow
def test_apps_with_different_delayq_key_prefixes_share_the_queue_lists(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Once due, a task of app A goes into the list ``default``, where app B's worker,
    which consumes a queue of that name, takes it."""
    a = make_app(**A)
    shared = send(a, "a's task")
    assert celery_delayq.reschedule(a, shared.id, countdown=0) == 1
    with (
        standalone_mover(redis_server.url, A),
        celery_process("worker", redis_server.url, B, "-P", "solo"),
    ):
        wait_until(lambda: [r["id"] for r in runs(redis_client)] == [shared.id], timeout=15)
