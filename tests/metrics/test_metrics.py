"""Prometheus metrics: every family and value read from a real Redis, over HTTP too."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

import celery_delayq
from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.metrics import start_exporter
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.periodic.writer import OccurrenceWriter
from celery_delayq.testing import RedisServer, free_port, wait_until

from ..helpers import fetch_metrics, invoke, noop_task, parse_metrics, publish_limited, scrape

pytestmark = pytest.mark.integration

# An optional extra: skip, rather than fail, where it is not installed.
pytest.importorskip("prometheus_client")

QUICK = 0.5  # countdown of messages the tests let fall due


def q(queue: str, **labels: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"queue": queue, **labels}.items()))


@contextmanager
def exporter(app: Celery, **kwargs: Any) -> Iterator[int]:
    port = free_port()
    server, thread = start_exporter(app, port, "127.0.0.1", **kwargs)
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def send(app: Celery, queue: str, countdown: float) -> str:
    return str(app.send_task("x.y", countdown=countdown, queue=queue).id)


def overdue(app: Celery) -> dict[str, int]:
    with open_store(app) as store:
        return {entry.queue: entry.overdue for entry in store.backlog()}


def wait_until_late_by(app: Celery, seconds: float) -> None:
    """Wait until every overdue message is at least ``seconds`` late by the Redis clock
    (the clock moves and lateness are measured by)."""
    with open_store(app) as store:
        now_ms = store.server_time_ms()
        dues_ms = [round(m.due * 1000) for m in store.pending(limit=100)]
        latest_ms = max(due for due in dues_ms if due <= now_ms)
        late_ms = latest_ms + round(seconds * 1000)
        wait_until(lambda: store.server_time_ms() >= late_ms, what=f"{seconds:g} s late")


FAMILIES = {
    "celery_delayq_up": "gauge",
    "celery_delayq_pending": "gauge",
    "celery_delayq_overdue": "gauge",
    "celery_delayq_lag_seconds": "gauge",
    "celery_delayq_next_due_timestamp_seconds": "gauge",
    "celery_delayq_in_flight": "gauge",
    "celery_delayq_dead_letters": "gauge",
    "celery_delayq_scheduled": "counter",
    "celery_delayq_moved": "counter",
    "celery_delayq_cancelled": "counter",
    "celery_delayq_replaced": "counter",
    "celery_delayq_dropped": "counter",
    "celery_delayq_refused": "counter",
    "celery_delayq_dead_lettered": "counter",
    "celery_delayq_move_lateness_seconds": "histogram",
    "celery_delayq_movers_alive": "gauge",
    "celery_delayq_redelivered": "counter",
    "celery_delayq_periodic_late": "counter",
    "celery_delayq_periodic_missed": "counter",
    "celery_delayq_periodic_skipped": "counter",
    "celery_delayq_periodic_last_run_timestamp_seconds": "gauge",
    "celery_delayq_flow_buckets": "gauge",
    "celery_delayq_flow_keyed_buckets": "gauge",
    "celery_delayq_flow_waiting": "gauge",
    "celery_delayq_flow_running": "gauge",
    "celery_delayq_flow_throttled_buckets": "gauge",
    "celery_delayq_flow_held_buckets": "gauge",
    "celery_delayq_flow_released": "counter",
}


def test_every_family_and_value(app: Celery) -> None:
    long_alpha = [send(app, "alpha", 3600) for _ in range(3)]
    for _ in range(2):
        send(app, "alpha", QUICK)
    for _ in range(2):
        send(app, "beta", 3600)
    send(app, "beta", QUICK)
    send(app, "gamma", QUICK)
    wait_until(lambda: sum(overdue(app).values()) == 4)
    wait_until_late_by(app, 0.3)  # every move below is then at least 300 ms late
    with open_store(app) as store:
        assert store.move_all_due().moved == 4
    assert celery_delayq.cancel(app, long_alpha[0]) == 1
    send(app, "beta", QUICK)  # left overdue, unmoved: beta's lag
    wait_until(lambda: overdue(app)["beta"] == 1)
    wait_until_late_by(app, 0.2)
    with open_store(app) as store:
        now = store.server_time_ms() / 1000
        store.movers.beat("fresh", {"id": "fresh", "last_seen": now - 1})
        store.movers.beat("stale", {"id": "stale", "last_seen": now - 16})  # default: 15 s
        heads = {name: store.pending(queue=name, limit=1)[0].due for name in ("alpha", "beta")}
        stats = {name: store.stats(name) for name in ("alpha", "beta", "gamma")}

    types, samples = parse_metrics(scrape(app))

    assert types == FAMILIES
    assert samples["celery_delayq_up"] == {(): 1}
    assert samples["celery_delayq_pending"] == {q("alpha"): 2, q("beta"): 3, q("gamma"): 0}
    assert samples["celery_delayq_overdue"] == {q("alpha"): 0, q("beta"): 1, q("gamma"): 0}
    lag = samples["celery_delayq_lag_seconds"]
    assert lag.keys() == {q("alpha"), q("beta"), q("gamma")}
    assert lag[q("alpha")] == lag[q("gamma")] == 0
    assert 0.2 <= lag[q("beta")] < 30
    # Nothing pending in gamma: no next due time at all, rather than a made-up one.
    assert samples["celery_delayq_next_due_timestamp_seconds"] == {
        q("alpha"): heads["alpha"],
        q("beta"): heads["beta"],
    }
    assert heads["alpha"] == pytest.approx(time.time() + 3600, abs=60)
    assert samples["celery_delayq_scheduled_total"] == {q("alpha"): 5, q("beta"): 4, q("gamma"): 1}
    assert samples["celery_delayq_moved_total"] == {q("alpha"): 2, q("beta"): 1, q("gamma"): 1}
    assert samples["celery_delayq_cancelled_total"] == {q("alpha"): 1, q("beta"): 0, q("gamma"): 0}
    nothing = {q("alpha"): 0, q("beta"): 0, q("gamma"): 0}  # no hand-over on a Redis broker
    assert samples["celery_delayq_in_flight"] == samples["celery_delayq_dead_letters"] == nothing
    assert samples["celery_delayq_dead_lettered_total"] == nothing
    for unkeyed in ("replaced", "dropped", "refused"):
        assert samples[f"celery_delayq_{unkeyed}_total"] == nothing
    assert samples["celery_delayq_movers_alive"] == {(): 1}

    buckets = samples["celery_delayq_move_lateness_seconds_bucket"]
    counts = samples["celery_delayq_move_lateness_seconds_count"]
    sums = samples["celery_delayq_move_lateness_seconds_sum"]
    bounds = ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5", "5.0"]
    bounds += ["10.0", "30.0", "60.0", "+Inf"]
    for name, moved in {"alpha": 2, "beta": 1, "gamma": 1}.items():
        series = [buckets[q(name, le=le)] for le in bounds]
        assert len(buckets) == len(bounds) * 3
        assert series == sorted(series), "buckets must be cumulative"
        assert series[-1] == counts[q(name)] == moved == stats[name]["late_count"]
        assert series[bounds.index("0.25")] == 0  # every move was >= 300 ms late
        running = 0
        for le, value in zip(bounds[:-1], series):
            running += stats[name].get(f"late_le_{round(float(le) * 1000)}", 0)
            assert value == running
        assert sums[q(name)] == stats[name]["late_sum_ms"] / 1000
        assert 0.3 * moved <= sums[q(name)] < 60 * moved


def test_flow_control_per_queue_and_task_adds_its_limit_keys_up(make_app: Any) -> None:
    """Per queue and task, never per limit key (a series per customer): buckets, of them
    keyed, waiting, running, throttled, paused or held, released; equal to what was
    published and what the move delivered."""
    app = make_app(delayq_rate_limits={"t.send": "1/m"}, delayq_concurrency_limits={"t.run": 2})
    for key in range(50):
        publish_limited(app, "t.send", 2, key=f"customer-{key}")
    publish_limited(app, "t.send", 3, key="paused", queue="other")
    publish_limited(app, "t.run", 5)
    with open_store(app) as store:
        store.move_all_due()
        paused = b"delayq:{other}:fc:s:t.send\x00paused"
        store.client.hset(paused, "hold", "paused")
        delivered = {name: store.client.llen(name) for name in ("default", "other")}

    _, samples = parse_metrics(scrape(app))

    assert delivered == {"default": 50 + 2, "other": 1}
    send, run, other = (
        q("default", task="t.send"),
        q("default", task="t.run"),
        q("other", task="t.send"),
    )
    assert samples["celery_delayq_flow_buckets"] == {send: 50, run: 1, other: 1}
    assert samples["celery_delayq_flow_keyed_buckets"] == {send: 50, run: 0, other: 1}
    assert samples["celery_delayq_flow_waiting"] == {send: 50, run: 3, other: 2}
    assert samples["celery_delayq_flow_running"] == {send: 0, run: 2, other: 0}
    assert samples["celery_delayq_flow_throttled_buckets"] == {send: 50, run: 1, other: 1}
    assert samples["celery_delayq_flow_held_buckets"] == {send: 0, run: 0, other: 1}
    assert samples["celery_delayq_flow_released_total"] == {send: 50, run: 2, other: 1}


@pytest.mark.promise("flow-released-never-goes-back")
def test_flow_released_never_goes_back_when_bucket_states_expire(make_app: Any) -> None:
    """A limit key's state (and its own count) expires a day after it stops mattering;
    the released counter, kept per task apart from the states, does not drop."""
    app = make_app(delayq_rate_limits={"t.send": "1/m"})
    for key in range(5):
        publish_limited(app, "t.send", 1, key=f"customer-{key}")
    with open_store(app) as store:
        store.move_all_due()  # each released at once: the buckets idle, found by the index
        send = q("default", task="t.send")
        _, before = parse_metrics(scrape(app))
        assert before["celery_delayq_flow_buckets"] == {send: 5}
        assert before["celery_delayq_flow_released_total"] == {send: 5}

        # every state expires in Redis itself, as it would a day after its last release
        states = [b"delayq:{default}:fc:s:t.send\x00customer-%d" % key for key in range(5)]
        assert store.client.exists(*states) == 5
        for state in states:
            store.client.pexpire(state, 1)
        wait_until(lambda: store.client.exists(*states) == 0, what="the states expired")
        _, expired = parse_metrics(scrape(app))
        assert expired["celery_delayq_flow_buckets"] == {send: 0}  # the states are gone
        assert expired["celery_delayq_flow_released_total"] == {send: 5}

        publish_limited(app, "t.send", 1, key="customer-0")  # a fresh state, counting from 0
        store.move_all_due()
        assert store.client.hget(states[0], "released") == b"1"
    _, after = parse_metrics(scrape(app))
    assert after["celery_delayq_flow_released_total"] == {send: 6}


def test_keyed_messages_are_counted_as_replaced_dropped_and_refused(app: Celery) -> None:
    task = noop_task(app)
    for n in range(3):
        celery_delayq.debounce(task, (n,), key="a", countdown=600)
    for n in range(3):
        celery_delayq.schedule_keyed(task, (n,), key="b", on_held="keep", countdown=600)
    celery_delayq.schedule_keyed(task, (0,), key="c", on_held="reject", countdown=600)
    with pytest.raises(celery_delayq.DelayKeyHeld):
        celery_delayq.schedule_keyed(task, (1,), key="c", on_held="reject", countdown=600)

    _, samples = parse_metrics(scrape(app))

    queue = q(app.conf.task_default_queue)
    assert samples["celery_delayq_replaced_total"] == {queue: 2}
    assert samples["celery_delayq_dropped_total"] == {queue: 2}
    assert samples["celery_delayq_refused_total"] == {queue: 1}
    assert samples["celery_delayq_scheduled_total"] == {queue: 5}
    assert samples["celery_delayq_pending"] == {queue: 3}


def test_periodic_entries_late_missed_and_last_run(app: Celery) -> None:
    """Every beat down for an hour after the upsert wrote a minutely entry 5 minutes ahead
    (the default horizon): of the 55 occurrences missed, catch_up "latest" runs one late
    and skips 54. A worker's run is recorded."""
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "minutely", "x.y", 60, now=start)
        periodic.upsert(app, "never-missed", "x.y", 60, now=start)
    writer = OccurrenceWriter(app, timedelta(seconds=30), settle=timedelta(0))
    found = periodic.get(app, "minutely")
    assert found is not None
    writer.advance(found.entry, found.version, start + timedelta(minutes=60, seconds=30))
    with open_store(app) as store:
        history = EntryHistory(store.client, store.keys)
        history.ran("minutely", start, start)
        # overlap skip: the next run holds the entry, the one after is skipped
        history.ran("minutely", start + timedelta(minutes=1), start, lease_ms=60_000)
        history.ran("minutely", start + timedelta(minutes=2), start, lease_ms=60_000)

    _, samples = parse_metrics(scrape(app))

    def entry(name: str) -> tuple[tuple[str, str], ...]:
        return (("entry", name),)

    assert samples["celery_delayq_periodic_late_total"] == {
        entry("minutely"): 1,
        entry("never-missed"): 0,
    }
    assert samples["celery_delayq_periodic_missed_total"] == {
        entry("minutely"): 54,
        entry("never-missed"): 0,
    }
    assert samples["celery_delayq_periodic_skipped_total"] == {
        entry("minutely"): 1,
        entry("never-missed"): 0,
    }
    assert samples["celery_delayq_periodic_last_run_timestamp_seconds"] == {
        entry("minutely"): start.timestamp()
    }


def test_empty_store_and_movers_alive_window(app: Celery) -> None:
    types, samples = parse_metrics(scrape(app))
    assert types == FAMILIES
    assert samples == {"celery_delayq_up": {(): 1}, "celery_delayq_movers_alive": {(): 0}}

    with open_store(app) as store:
        store.movers.beat("m", {"id": "m", "last_seen": store.server_time_ms() / 1000 - 10})
    assert parse_metrics(scrape(app, alive_within=30))[1]["celery_delayq_movers_alive"] == {(): 1}
    assert parse_metrics(scrape(app, alive_within=5))[1]["celery_delayq_movers_alive"] == {(): 0}


def test_movers_alive_window_follows_mover_max_sleep(make_app: Callable[..., Celery]) -> None:
    app = make_app(delayq_mover_max_sleep=20.0)  # alive within 2 * 20 + 5 s
    with open_store(app) as store:
        now = store.server_time_ms() / 1000
        store.movers.beat("slow", {"id": "slow", "last_seen": now - 40})
        store.movers.beat("gone", {"id": "gone", "last_seen": now - 50})
    assert parse_metrics(scrape(app))[1]["celery_delayq_movers_alive"] == {(): 1}


def test_exporter_serves_the_same_text(app: Celery) -> None:
    for queue in ("alpha", "alpha", "beta"):
        send(app, queue, 3600)  # nothing overdue: the text does not change between scrapes
    with exporter(app) as port:
        served = fetch_metrics(port)
    assert served == scrape(app)
    assert parse_metrics(served)[1]["celery_delayq_pending"] == {q("alpha"): 2, q("beta"): 1}


def test_exporter_answers_while_redis_is_down(make_app: Callable[..., Celery]) -> None:
    with RedisServer() as server:
        app = make_app(url=server.url)
        send(app, "alpha", 3600)
        with exporter(app) as port:
            assert parse_metrics(fetch_metrics(port))[1]["celery_delayq_up"] == {(): 1}
            server.stop(kill=True)
            for _ in range(2):  # the failed scrape must not break the next one
                types, samples = parse_metrics(fetch_metrics(port))
                assert types == {"celery_delayq_up": "gauge"}
                assert samples == {"celery_delayq_up": {(): 0}}
            server.start()
            wait_until(lambda: parse_metrics(fetch_metrics(port))[1]["celery_delayq_up"] == {(): 1})


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_exporter_command_serves_until_signalled(app: Celery, signum: int) -> None:
    send(app, "alpha", 3600)
    port = free_port()
    original = signal.getsignal(signum)
    fetched: list[str] = []

    def scrape_then_signal() -> None:
        def serving() -> bool:
            if signal.getsignal(signum) is original:  # the command's handler is not set yet
                return False
            try:
                fetched.append(fetch_metrics(port))
            except OSError:
                return False
            return True

        wait_until(serving, timeout=20)
        os.kill(os.getpid(), signum)

    helper = threading.Thread(target=scrape_then_signal, daemon=True)
    helper.start()
    result = invoke(app, "exporter", "--port", str(port), "--addr", "127.0.0.1")
    helper.join(timeout=10)

    assert result.exit_code == 0, result.output
    assert "stopped" in result.output
    assert signal.getsignal(signum) is original
    assert parse_metrics(fetched[0])[1]["celery_delayq_pending"] == {q("alpha"): 1}
    with pytest.raises(OSError):
        fetch_metrics(port)  # the server is closed


def test_exporter_command_reports_a_busy_port(app: Celery) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = invoke(app, "exporter", "--port", str(port), "--addr", "127.0.0.1")
    assert result.exit_code == 1
    assert "Error:" in result.output
