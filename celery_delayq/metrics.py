"""Prometheus metrics of the delayed store, read from Redis at scrape time.

Nothing is counted in process memory: the Lua scripts keep the counters in Redis and
the collector reads the store on every scrape. So every process that exposes these
metrics (a worker, beat, ``celery delayq exporter``) reports the same cluster-wide
numbers; aggregate them across instances with ``max``, never ``sum``.

Needs the optional extra: ``pip install celery-delayq[prometheus]``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click
import redis
from celery import Celery
from kombu.exceptions import KombuError

from .app_lookup import uses_delayq
from .config import DelayqConfig
from .connect import TRANSPORT_HINT, open_store
from .errors import ConfigurationError
from .store import LATENESS_BUCKETS_MS, DelayedStore

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.metrics_core import Metric

logger = logging.getLogger(__name__)

DEFAULT_PORT = 9808
#: Failures that mean "the store cannot be read right now": reported as celery_delayq_up 0.
READ_ERRORS = (redis.RedisError, KombuError, OSError)


def _require_prometheus() -> None:
    """prometheus_client is an optional extra: say how to get it when it is missing."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ImportError(
            "celery-delayq metrics need prometheus_client: pip install 'celery-delayq[prometheus]'"
        ) from None


class DelayqCollector:
    """A prometheus_client collector (``registry.Collector``) reading the store per scrape.

    ``collect`` does not raise when Redis cannot be reached: it then yields only
    ``celery_delayq_up 0``, so the HTTP endpoint keeps answering.
    """

    def __init__(self, app: Celery, alive_within: float | None = None) -> None:
        _require_prometheus()
        self.app = app
        if alive_within is None:
            alive_within = DelayqConfig.from_app(app).mover_alive_within
        self.alive_within = alive_within

    def describe(self) -> list[Metric]:
        """Nothing, so that registering never reads Redis (a registry would collect)."""
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import GaugeMetricFamily

        families: list[Metric] = []
        up = 0
        try:
            with open_store(self.app) as store:
                families = self._read(store)  # everything is read before anything is yielded
            up = 1
        except READ_ERRORS as exc:
            logger.warning("celery-delayq metrics: cannot read the store: %r", exc)
        yield GaugeMetricFamily(
            "celery_delayq_up",
            "1 when this scrape could read the delayed store from Redis, else 0.",
            value=up,
        )
        yield from families

    def _read(self, store: DelayedStore) -> list[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        now = store.server_time_ms() / 1000.0
        backlog, movers = store.backlog(), store.movers()
        q = ["queue"]
        pending = GaugeMetricFamily(
            "celery_delayq_pending", "Delayed messages waiting in the store.", labels=q
        )
        overdue = GaugeMetricFamily(
            "celery_delayq_overdue", "Pending delayed messages already due.", labels=q
        )
        lag = GaugeMetricFamily(
            "celery_delayq_lag_seconds", "How long the oldest overdue message has waited.", labels=q
        )
        next_due = GaugeMetricFamily(
            "celery_delayq_next_due_timestamp_seconds",
            "Due time of the earliest pending message (absent when none is pending).",
            labels=q,
        )
        scheduled = CounterMetricFamily(
            "celery_delayq_scheduled", "Messages stored until their ETA.", labels=q
        )
        moved = CounterMetricFamily(
            "celery_delayq_moved", "Delayed messages delivered to their queue.", labels=q
        )
        cancelled = CounterMetricFamily(
            "celery_delayq_cancelled", "Pending delayed messages cancelled.", labels=q
        )
        lateness = HistogramMetricFamily(
            "celery_delayq_move_lateness_seconds",
            "Time from a message's due time to its move, by the Redis clock.",
            labels=q,
        )
        for entry in backlog:
            labels = [entry.queue]
            pending.add_metric(labels, entry.pending)
            overdue.add_metric(labels, entry.overdue)
            lag.add_metric(labels, entry.lag)
            if entry.next_due is not None:
                next_due.add_metric(labels, entry.next_due)
            stats = store.stats(entry.queue)
            scheduled.add_metric(labels, stats.get("scheduled", 0))
            moved.add_metric(labels, stats.get("moved", 0))
            cancelled.add_metric(labels, stats.get("cancelled", 0))
            lateness.add_metric(labels, *lateness_buckets(stats))
        alive = sum(1 for beat in movers if now - beat.get("last_seen", 0) <= self.alive_within)
        movers_alive = GaugeMetricFamily(
            "celery_delayq_movers_alive",
            f"Movers whose last heartbeat is at most {self.alive_within:g}s old.",
            value=alive,
        )
        per_queue = [pending, overdue, lag, next_due, scheduled, moved, cancelled, lateness]
        return [*per_queue, movers_alive]


def lateness_buckets(stats: dict[str, int]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative ``(le, count)`` buckets in seconds, and the sum, from a stats hash.

    Redis keeps one non-cumulative counter per bucket (``late_le_<ms>``, ``late_le_inf``).
    Bounds found in Redis but not in ``LATENESS_BUCKETS_MS`` (written by another version)
    are kept, so ``+Inf`` always equals the number of observations.
    """
    from prometheus_client.utils import floatToGoString

    found = {int(k[8:]) for k in stats if k.startswith("late_le_") and k[8:].isdigit()}
    buckets: list[tuple[str, float]] = []
    count = 0
    for bound_ms in sorted(found.union(LATENESS_BUCKETS_MS)):
        count += stats.get(f"late_le_{bound_ms}", 0)
        buckets.append((floatToGoString(bound_ms / 1000.0), count))
    buckets.append(("+Inf", count + stats.get("late_le_inf", 0)))
    return buckets, stats.get("late_sum_ms", 0) / 1000.0


def start_exporter(
    app: Celery, port: int, addr: str = "0.0.0.0", *, alive_within: float | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` from a daemon thread; returns prometheus_client's (server, thread).

    The registry holds only the delayq collector: its numbers are cluster-wide, not
    about this process, and a registry of its own cannot clash with metrics the
    application registers in the default one. Stop with ``server.shutdown()``.
    """
    _require_prometheus()
    from prometheus_client import CollectorRegistry, start_http_server

    _check_app(app)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DelayqCollector(app, alive_within))
    return start_http_server(port, addr, registry)


def start_configured_exporter(app: Celery) -> WSGIServer | None:
    """Start the exporter when ``delayq_metrics_port`` is set (workers and beat call this);
    returns the server to ``shutdown()``, or None."""
    config = DelayqConfig.from_app(app)
    if config.metrics_port is None:
        return None
    server, _ = start_exporter(app, config.metrics_port, config.metrics_addr)
    logger.info("celery-delayq: metrics on http://%s:%d/metrics", config.metrics_addr,
                config.metrics_port)  # fmt: skip
    return server


def _check_app(app: Celery) -> None:
    """Fail at start-up, not at every scrape, on settings that can never work."""
    DelayqConfig.from_app(app)
    if not uses_delayq(app):
        raise ConfigurationError("the broker transport is not celery-delayq: " + TRANSPORT_HINT)


@click.command("exporter")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="HTTP port.")
@click.option("--addr", default="0.0.0.0", show_default=True, help="Address to listen on.")
@click.option(
    "--alive-within",
    type=float,
    help="Seconds since its last heartbeat for a mover to count as alive "
    "[default: 2 * delayq_mover_max_sleep + 5].",
)
def exporter_command(port: int, addr: str, alive_within: float | None) -> None:
    """Serve Prometheus metrics of the delayed store until SIGTERM or SIGINT."""
    app = click.get_current_context().obj.app
    try:
        server, thread = start_exporter(app, port, addr, alive_within=alive_within)
    except (ImportError, OSError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        click.echo(f"celery-delayq exporter: serving http://{addr}:{port}/metrics", err=True)
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        server.shutdown()
        server.server_close()
        thread.join()
    click.echo("celery-delayq exporter: stopped", err=True)
