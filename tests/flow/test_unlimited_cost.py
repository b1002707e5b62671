"""Tasks without limits pay nothing for flow control: publishing immediate and countdown
messages of an unlimited task and moving them takes the same Redis commands, by name and
count (the client's own, and those the scripts run), whether flow control is configured
for another task or not configured at all. Counted with MONITOR on a private server."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

import kombu.pools
import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import RedisServer, wait_until

pytestmark = pytest.mark.integration

PLAIN = "flow.plain"
#: Marks the end of the commands counted (MONITOR shows it once everything before it ran).
END = "flow-cost-end"
N = 50
#: How far ahead the countdown messages' common ETA is (N publishes must take less).
ETA_MS = 2000


@contextmanager
def monitored(server: RedisServer) -> Iterator[Counter[tuple[str, str]]]:
    """Every command the server runs meanwhile: (client kind, command name) -> count,
    the client kind being "lua" for a command a script ran, "client" otherwise."""
    seen: Counter[tuple[str, str]] = Counter()
    client = server.client()
    ready = threading.Event()

    def read() -> None:
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                words = command["command"].split(" ", 2)
                if words[0].upper() == "ECHO" and END in command["command"]:
                    return
                kind = "lua" if command["client_type"] == "lua" else "client"
                seen[kind, words[0].upper()] += 1

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    ready.wait(10)
    server.client().ping()  # MONITOR is on once a later command shows up in it
    yield seen
    server.client().echo(END)
    thread.join(30)
    assert not thread.is_alive(), "MONITOR never showed the end mark"
    seen.pop(("client", "PING"), None)


def publish_and_move(app: Celery, server: RedisServer) -> Counter[tuple[str, str]]:
    """The commands of N immediate and N countdown messages published and of one move
    pass, after the same done once (scripts loaded, queue declared and known to the
    store). The countdown messages share one ETA, so the move's lateness histogram takes
    the same writes however late it runs; the wait for it is not counted."""
    client = server.client()

    def publish() -> int:
        due = server_ms(client) + ETA_MS
        eta = datetime.fromtimestamp(due / 1000, timezone.utc)
        for _ in range(N):
            app.send_task(PLAIN)
            app.send_task(PLAIN, eta=eta)
        return due

    def after(due: int) -> None:
        with open_store(app) as store:  # else a slow publish sent some due, unstored
            assert store.pending_counts(["default"])["default"] == N, "publish over ETA_MS"
        wait_until(lambda: server_ms(client) > due + 50, timeout=10, interval=0.01)

    def move() -> None:
        with open_store(app) as store:
            store.move_all_due()

    after(publish())
    move()
    with monitored(server) as published:
        due = publish()
    after(due)
    with monitored(server) as moved:
        move()
    assert client.llen("default") == 4 * N  # all delivered: the same work on both sides
    return published + moved


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_an_unlimited_task_takes_the_same_redis_commands_with_flow_control_configured(
    app_factory: Callable[..., Celery],
) -> None:
    counts = []
    for limits in ({}, {"delayq_rate_limits": {"flow.other": "1/s"}}):
        # a private server each time: MONITOR would count any other client of a shared one
        with RedisServer() as server:
            kombu.pools.reset()  # a producer pool per URL: each app's channels its own
            app = app_factory(
                server.url, delayq_move_call_budget=0, delayq_move_batch_size=1000, **limits
            )
            counts.append(publish_and_move(app, server))
            app.close()
    plain, configured = counts
    assert plain[("client", "EVALSHA")] >= N + 1  # N countdown publishes and the move
    assert plain[("client", "LPUSH")] >= N  # the immediate publishes
    assert configured == plain
