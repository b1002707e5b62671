"""``celery inspect scheduled`` lists delayed messages, once per request, in Celery's format.

Real ``celery worker`` subprocesses (and Celery's in-process test worker) on the session's
Redis; every wait polls a condition.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import types
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import kombu.pidbox
import pytest
from celery import Celery

import celery_delayq
from celery_delayq import ConfigurationError
from celery_delayq.brokers.connect import open_store
from celery_delayq.brokers.redis.channel import Channel
from celery_delayq.config.settings import DelayqConfig
from celery_delayq.core.store import LISTING_CLAIM_MS
from celery_delayq.testing import wait_until
from celery_delayq.testing.processes import free_port
from celery_delayq.worker.inspect import (
    DelayedScheduleNode,
    delayed_schedule,
    list_delayed_in_scheduled,
)

from ..helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

REMEMBER = "tests.worker_app.remember"
HOST = socket.gethostname()


def node(name: str) -> str:
    return f"{name}@{HOST}"


def worker(redis_server, name: str, queues: str = "default", settings: dict | None = None):
    return celery_process(
        "worker", redis_server.url, settings or {}, "-P", "solo", "-n", node(name), "-Q", queues
    )


def in_minutes(minutes: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(minutes=minutes)


def scheduled(app: Celery, *names: str, replies: int = 1) -> dict[str, list[dict[str, Any]]]:
    """The replies of ``names`` (all workers if none) to one ``scheduled`` request."""
    destination = [node(name) for name in names] or None
    inspect = app.control.inspect(destination=destination, timeout=10, limit=replies)
    return inspect.scheduled() or {}


def listed_ids(entries: list[dict[str, Any]]) -> list[str]:
    return [entry["request"]["id"] for entry in entries]


def test_a_delayed_task_is_listed_like_a_timer_entry_until_it_runs(
    make_app, redis_server, redis_client
):
    """Celery's own entry (a vanilla ETA message in the worker's timer) is kept, and the
    delayed task's entry is exactly what Celery would list had the worker received it."""
    app = make_app()
    vanilla = make_app(broker_transport="redis")
    with worker(redis_server, "w1"):
        held = vanilla.send_task(REMEMBER, ("held",), eta=in_minutes(10))
        wait_until(lambda: redis_client.hlen("unacked") == 1)  # in the worker's timer now
        eta = in_minutes(5)
        delayed = app.send_task(REMEMBER, (), {"label": "delayed"}, eta=eta)

        timer_entry, delayed_entry = scheduled(app)[node("w1")]

        assert timer_entry["request"]["id"] == held.id
        assert delayed_entry == {
            "eta": eta.isoformat(),
            "priority": 6,
            "request": {
                "id": delayed.id,
                "name": REMEMBER,
                "args": [],
                "kwargs": {"label": "delayed"},
                "type": REMEMBER,
                "hostname": node("w1"),
                "time_start": None,
                "acknowledged": False,
                "delivery_info": {
                    "exchange": "",
                    "routing_key": "default",
                    "priority": 0,
                    "redelivered": False,
                },
                "worker_pid": None,
            },
        }
        # Field for field as Celery lists the message it holds itself.
        assert delayed_entry["priority"] == timer_entry["priority"]
        vanilla_request = {**timer_entry["request"], "id": None, "args": None, "kwargs": None}
        assert {**delayed_entry["request"], "id": None, "args": None, "kwargs": None} == (
            vanilla_request
        )

        celery_delayq.reschedule(app, delayed.id, countdown=0.2)
        wait_until(lambda: [run["id"] for run in runs(redis_client)] == [delayed.id])

        assert listed_ids(scheduled(app)[node("w1")]) == [held.id]


def test_each_delayed_task_is_listed_once_per_request_by_a_worker_consuming_its_queue(
    make_app, redis_server
):
    """w1 consumes ``default``, w2 ``default`` and ``other``: in the replies to one
    request every delayed task appears once, and never in a worker not consuming its
    queue; a request sent to one worker alone gets all of that worker's queues."""
    app = make_app()
    default = [app.send_task(REMEMBER, (str(i),), eta=in_minutes(5 + i)).id for i in range(3)]
    other = app.send_task(REMEMBER, ("other",), eta=in_minutes(4), queue="other").id
    with worker(redis_server, "w1", "default"), worker(redis_server, "w2", "default,other"):
        for _ in range(5):
            replies = scheduled(app, replies=2)
            assert set(replies) == {node("w1"), node("w2")}
            listed = Counter(task for entries in replies.values() for task in listed_ids(entries))
            assert listed == Counter([*default, other])
            assert other not in listed_ids(replies[node("w1")])

        assert listed_ids(scheduled(app, "w1")[node("w1")]) == default
        assert listed_ids(scheduled(app, "w2")[node("w2")]) == [other, *default]


def test_a_reply_lists_at_most_delayq_inspect_limit_the_earliest_due(make_app, redis_server):
    app = make_app()
    sent = [app.send_task(REMEMBER, (str(i),), eta=in_minutes(10 - i)).id for i in range(5)]
    with worker(redis_server, "w1", settings={"delayq_inspect_limit": 2}) as proc:
        assert listed_ids(scheduled(app)[node("w1")]) == [sent[4], sent[3]]
        wait_until(lambda: "lists the 2 earliest of 5 delayed messages" in proc.output)


def test_delayq_inspect_limit_0_lists_no_delayed_task(make_app, redis_server):
    app = make_app()
    app.send_task(REMEMBER, ("later",), eta=in_minutes(5))
    with worker(redis_server, "w1", settings={"delayq_inspect_limit": 0}):
        assert scheduled(app) == {node("w1"): []}


@pytest.mark.parametrize("limit", [-1, 100_001, 2.5, True, "10"])
def test_delayq_inspect_limit_is_validated(limit):
    with pytest.raises(ConfigurationError, match="delayq_inspect_limit"):
        DelayqConfig(inspect_limit=limit)


def test_only_apps_using_the_transport_answer_with_delayed_tasks(make_app):
    """The worker_init hook changes the node class of the app's own mailbox, once; another
    app in the process, on the plain transport, keeps kombu's."""
    app = make_app()
    plain = make_app(broker_transport="redis")
    for _ in range(2):
        list_delayed_in_scheduled(app)
        list_delayed_in_scheduled(plain)
    assert app.control.mailbox.node_cls.__mro__.count(DelayedScheduleNode) == 1
    assert issubclass(app.control.mailbox.node_cls, kombu.pidbox.Node)
    assert plain.control.mailbox.node_cls is kombu.pidbox.Node


def test_celerys_in_process_test_worker_moves_and_lists_delayed_tasks(
    make_app, redis_client, redis_server
):
    """``celery.contrib.testing.worker.start_worker`` (what ``celery_worker`` and
    ``celery_session_worker`` use) sends ``worker_init`` like ``celery worker``: with the
    transport in the test app's settings, its worker moves and lists delayed tasks."""
    from celery import _state
    from celery.contrib.testing.worker import start_worker

    app = make_app(worker_hijack_root_logger=False)
    default_app = _state.default_app  # start_worker makes the app the default for good
    root = logging.getLogger()
    root_level = root.level  # and sets the root logger to its log level (ERROR) for good

    @app.task(name="tests.in_process.touch")
    def touch(label: str) -> None:
        redis_client.rpush("test:touched", label)

    try:
        with start_worker(app, pool="solo", perform_ping_check=False, hostname=node("inproc")):
            later = touch.apply_async(("later",), eta=in_minutes(5))
            assert listed_ids(scheduled(app)[node("inproc")]) == [later.id]
            touch.apply_async(("soon",), countdown=0.3)
            wait_until(lambda: redis_client.lrange("test:touched", 0, -1) == [b"soon"])
            movers = [thread for thread in threading.enumerate() if "mover" in thread.name]
            assert movers, "the in-process worker runs a mover thread"
        wait_until(lambda: not any(thread.is_alive() for thread in movers))
    finally:
        _state.set_default_app(default_app)
        root.setLevel(root_level)


def test_a_queue_is_claimed_once_per_request_under_the_apps_key_prefixes(make_app, redis_client):
    """``SET NX`` per (queue, ticket): the first worker gets each queue, another ticket is
    a new request; the keys follow kombu's ``global_keyprefix`` and expire by themselves."""
    app = make_app(broker_transport_options={"global_keyprefix": "app1:"})
    with open_store(app) as store:
        assert store.claim_listing(["a", "b"], "ticket-1", node("w1")) == ["a", "b"]
        assert store.claim_listing(["b", "c"], "ticket-1", node("w2")) == ["c"]
        assert store.claim_listing(["a"], "ticket-2", node("w2")) == ["a"]
    key = "app1:delayq:{b}:inspect:ticket-1"
    assert redis_client.get(key) == node("w1").encode()
    assert 0 < redis_client.pttl(key) <= LISTING_CLAIM_MS


def test_a_listing_that_fails_adds_nothing_and_is_logged(make_app, caplog):
    """Celery's own entries are never lost to Redis failing while delayed ones are read:
    the store (opened by the store factory, as the command line's) is on a Redis that
    refuses connections, which one attempt finds, not kombu's retries."""
    app = make_app(f"redis://127.0.0.1:{free_port()}/0")
    consumer = types.SimpleNamespace(task_consumer=types.SimpleNamespace(queues=[]))
    state = types.SimpleNamespace(app=app, hostname=node("w1"), consumer=consumer)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        assert delayed_schedule(state, Channel, "ticket-1") == []
    assert time.monotonic() - started < 5
    assert "inspect scheduled lists no delayed messages" in caplog.text
    assert "Connection refused" in caplog.text
