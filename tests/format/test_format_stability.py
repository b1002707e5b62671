"""Records written by earlier celery-delayq code are still delivered, each exactly once.

``store-fixture.json`` holds the delayed stores as the code wrote them when the file was
made (make_fixtures.py): a Redis broker's own store (plain, and under a
``global_keyprefix`` and another key prefix), a separate store for a Redis broker (in
shards) and one for RabbitMQ, with records of every form, claims of movers that died
mid-hand-over, and a dead letter in each separate store. This test loads it into a fresh
Redis, runs today's workers on it and checks that every message runs once, that the dead
letters are listed and resent once their causes are fixed, and that nothing is left.
It stays for every later change of the store: a format change needs it to pass, or a
migration with its own test.

Only settings paths, the CLI (found through its entry point), ``celery_delayq``'s public
names and ``celery_delayq.testing``'s helpers are used here, so the test outlives any
reshuffle of the package's modules.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery import Celery
from click.testing import CliRunner

import celery_delayq
from celery_delayq.testing import (
    RedisServer,
    celery_command,
    spawn,
    stop_group,
    wait_until,
    wait_until_quiescent,
)

from .apps import BLOCKED, KINDS, RAN, RESULTS_DB, make_app, queues
from .redis_dump import load_db, read_fixture

pytestmark = pytest.mark.system

FIXTURE = Path(__file__).with_name("store-fixture.json")
ROOT = Path(__file__).parents[2]


@contextmanager
def workers(base: str, amqp_url: str, logs: Path) -> Iterator[None]:
    """A ``celery worker`` (with its mover) per app, all stopped together at the end."""
    started = []
    for kind in KINDS:
        env = {**os.environ, "FORMAT_APP": kind, "FORMAT_REDIS": base, "FORMAT_AMQP": amqp_url}
        names = ",".join(queue.name for queue in queues(kind))
        options = ["--pool=solo", "-Q", names, "-n", f"format-{kind}@%h", "--without-mingle"]
        command = celery_command("tests.format.worker", "worker", *options, "-l", "info")
        started.append(spawn(command, env, logs / f"{kind}.log", root=ROOT))
    try:
        yield
    finally:
        for process in started:
            stop_group(process, timeout=20)


def delayq(app: Celery, *args: str) -> str:
    """``celery -A <app> delayq <args>`` (the command Celery finds through its entry
    point), run in this process; its output."""
    found: Any = entry_points()
    group = (
        found.select(group="celery.commands")
        if hasattr(found, "select")
        else found.get("celery.commands", ())
    )  # Python 3.9's entry_points() is a dict
    # one entry point, seen twice when a source tree's egg-info is on the path too
    (command,) = {point.value: point for point in group if point.name == "delayq"}.values()
    app.set_current()  # as in a `celery -A` process, where it is the only app
    result = CliRunner().invoke(command.load(), list(args), obj=SimpleNamespace(app=app))
    assert result.exit_code == 0, result.output
    return result.stdout


def declare_queues(app: Celery) -> None:
    """Declare the AMQP app's queues before any mover publishes (a message for a queue
    the worker has not declared yet would be refused as unroutable, then retried)."""
    app.set_current()
    with app.connection_for_write() as connection:
        for queue in app.amqp.queues.values():
            queue(connection.default_channel).declare()


def amqp_idle(app: Celery) -> bool:
    """No message of the AMQP app waits in its queues or is held by its worker."""
    app.set_current()
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for queue in app.amqp.queues.values():
            if queue(channel).queue_declare(passive=True).message_count:
                return False
    inspect = app.control.inspect(timeout=1.0, limit=1)
    for ask in (inspect.active, inspect.reserved, inspect.scheduled):
        replies = ask()
        if not replies or any(replies.values()):
            return False
    return True


def left_over(apps: dict[str, Celery]) -> list[str]:
    """What is still pending, in flight or dead in any store."""
    found = []
    for kind, app in apps.items():
        app.set_current()
        for entry in celery_delayq.backlog(app):
            if entry.pending or entry.in_flight or entry.dead:
                found.append(f"{kind}: {entry}")
    return found


def missing(wanted: Counter[str], found: Counter[str]) -> list[str]:
    """The labels ``found`` has fewer times than ``wanted`` (Counter's ``<=`` needs 3.10)."""
    return sorted(label for label, times in wanted.items() if found[label] < times)


def test_every_record_of_the_fixture_is_delivered_exactly_once(
    rabbitmq_url: str, tmp_path: Path
) -> None:
    fixture = read_fixture(FIXTURE)
    messages = fixture["messages"]
    live = Counter(m["label"] for m in messages if not m.get("dead"))
    dead = {m["task_id"]: m for m in messages if m.get("dead")}
    everything = live + Counter(m["label"] for m in dead.values())
    with RedisServer() as server, ExitStack() as stack:
        for db, entries in fixture["databases"].items():
            assert load_db(redis.Redis(port=server.port, db=int(db)), entries) > 0
        base = f"redis://127.0.0.1:{server.port}"
        apps = {kind: make_app(kind, base, rabbitmq_url) for kind in KINDS}
        for app in apps.values():
            stack.callback(app.close)
        # the causes of the dead letters, fixed: the exchange exists, the list is free
        declare_queues(apps["amqp"])
        redis.Redis.from_url(apps["separate"].conf.broker_url).delete(BLOCKED)
        stack.enter_context(workers(base, rabbitmq_url, tmp_path))
        results = redis.Redis(port=server.port, db=RESULTS_DB)

        def ran() -> Counter[str]:
            labels: Any = results.lrange(RAN, 0, -1)
            return Counter(label.decode() for label in labels)

        def wait_for_runs(wanted: Counter[str], timeout: float) -> None:
            try:
                wait_until(lambda: not missing(wanted, ran()), timeout=timeout, interval=0.1)
            except TimeoutError:
                raise AssertionError(
                    f"never ran: {missing(wanted, ran())} (worker logs in {tmp_path})"
                ) from None

        wait_for_runs(live, timeout=60)
        for kind in sorted({m["app"] for m in dead.values()}):
            listed = json.loads(delayq(apps[kind], "list", "--dead", "--json"))
            assert {letter["id"] for letter in listed} == {
                task_id for task_id, m in dead.items() if m["app"] == kind
            }
            assert f"resent {len(listed)}" in delayq(apps[kind], "dead", "resend", "--all")
        wait_for_runs(everything, timeout=30)

        wait_until(lambda: not left_over(apps), timeout=30, what="every store is empty")
        for kind in (kind for kind in KINDS if kind != "amqp"):
            apps[kind].set_current()  # the channel takes its settings from the current app
            names = [queue.name for queue in queues(kind)]
            wait_until_quiescent(apps[kind], workers=1, queues=names)
        wait_until(lambda: amqp_idle(apps["amqp"]), timeout=30, what="RabbitMQ holds nothing")
        assert ran() == everything  # nothing can run any more: each ran exactly once
