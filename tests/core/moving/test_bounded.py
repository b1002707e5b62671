"""Bounded resources: a standalone mover drains a backlog far larger than one batch with
flat memory, delivering every message exactly once, while Redis keeps serving others.

The size is ``DELAYQ_BOUNDED_N`` (default 200,000, which fits CI); set it to 1000000 for
the full-size run.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psutil
import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import RedisServer, delivered_numbers, schedule_numbered, wait_until

from ...helpers import standalone_mover

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(600)]

N = int(os.environ.get("DELAYQ_BOUNDED_N", "200000"))
#: Messages the mover drains before its memory baseline is read (script loaded, code warm).
WARM_UP = 2_000
#: Most the mover's RSS may grow while it drains the whole backlog.
RSS_GROWTH_LIMIT = 10 * 1024 * 1024
#: Longest one round trip of another Redis client may take while the mover drains.
PROBE_LIMIT_SECONDS = 0.5
QUEUE = "bulk"


@dataclass
class Sampler:
    """Reads ``read()`` every ``interval`` seconds in a thread until stopped."""

    read: Callable[[], float]
    interval: float
    values: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Sampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.values.append(self.read())
            self._stop.wait(self.interval)


def probe_round_trip(client: redis.Redis) -> Callable[[], float]:
    """One LPUSH and BRPOP of another client, as a worker would consume: its duration."""

    def probe() -> float:
        start = time.perf_counter()
        client.lpush("probe", b"x")
        client.brpop(["probe"], timeout=5)
        return time.perf_counter() - start

    return probe


@pytest.fixture
def big_server() -> Iterator[RedisServer]:
    """A Redis of its own: the shared one stays small for the other tests."""
    with RedisServer() as server:
        yield server


def test_a_standalone_mover_drains_a_huge_backlog_in_flat_memory_exactly_once(
    make_app: Callable[..., Celery], big_server: RedisServer
) -> None:
    """Given a standalone mover, warmed up and then paused, and N due messages loaded
    meanwhile, when it resumes, then it delivers each exactly once, its RSS stays within
    a small bound, and another client's Redis round trips stay short throughout."""
    app = make_app(url=big_server.url)
    client = big_server.client()
    with open_store(app) as store, standalone_mover(big_server.url) as process:
        mover = psutil.Process(process.pid)
        wait_until(store.movers.all, timeout=30)
        now = store.server_time_ms()
        schedule_numbered(store, QUEUE, WARM_UP, now - 1000, first=N)  # numbered after the backlog
        wait_until(lambda: client.llen(QUEUE) == WARM_UP, timeout=30)
        mover.suspend()

        started = time.monotonic()
        schedule_numbered(store, QUEUE, N, now - 1000)
        load_seconds = time.monotonic() - started
        assert store.backlog()[0].overdue == N
        rss_start = mover.memory_info().rss

        with Sampler(lambda: mover.memory_info().rss, 0.05) as rss:
            with Sampler(probe_round_trip(big_server.client()), 0.05) as probes:
                started = time.monotonic()
                mover.resume()
                wait_until(lambda: client.llen(QUEUE) == N + WARM_UP, timeout=120, interval=0.05)
                drain_seconds = time.monotonic() - started
        rss_end = mover.memory_info().rss
        backlog = store.backlog()

    peak = max(rss.values)
    print(
        f"\nN={N:,}: load {load_seconds:.1f} s ({N / load_seconds:,.0f}/s); drain "
        f"{drain_seconds:.1f} s ({N / drain_seconds:,.0f}/s); mover RSS start "
        f"{rss_start / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, end "
        f"{rss_end / 2**20:.1f} MiB ({len(rss.values)} samples); other client's round "
        f"trips: {len(probes.values)}, longest {max(probes.values) * 1000:.1f} ms"
    )
    assert delivered_numbers(client, QUEUE) == list(range(N + WARM_UP))
    assert [(q.pending, q.overdue) for q in backlog] == [(0, 0)]
    assert peak - rss_start < RSS_GROWTH_LIMIT
    # A probe starts every 50 ms: Redis held up for long stretches would leave far fewer.
    assert len(probes.values) >= drain_seconds / 0.2, "the other client got too few turns"
    assert max(probes.values) < PROBE_LIMIT_SECONDS
