"""Prometheus metrics of the delayed store, read from Redis at scrape time.

Nothing is counted in process memory: the Lua scripts keep the counters in Redis and
the collector reads the store on every scrape. So every process that exposes these
metrics (a worker, beat, ``celery delayq exporter``) reports the same cluster-wide
numbers; aggregate them across instances with ``max``, never ``sum``.

Needs the optional extra: ``pip install celery-delayq[prometheus]``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import redis
from celery import Celery
from kombu.exceptions import KombuError

from .brokers.common.diverter import uses_delayq
from .brokers.connect import TRANSPORT_HINT, open_store
from .config.errors import ConfigurationError
from .config.settings import config_of
from .core.health.store_status import read_status
from .core.layout.queue_counters import LATENESS_BUCKETS_MS
from .core.results import QueueBacklog
from .core.store import DelayedStore
from .periodic.history import EntryHistory
from .periodic.registry import EntryRegistry

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


#: Per-queue gauges: name, help, and how to read the value from a QueueBacklog (None:
#: no sample).
GAUGES: tuple[tuple[str, str, Callable[[QueueBacklog], float | None]], ...] = (
    ("celery_delayq_pending", "Delayed messages waiting in the store.", lambda q: q.pending),
    ("celery_delayq_overdue", "Pending delayed messages already due.", lambda q: q.overdue),
    (
        "celery_delayq_lag_seconds",
        "How long the oldest overdue message has waited.",
        lambda q: q.lag,
    ),
    (
        "celery_delayq_next_due_timestamp_seconds",
        "Due time of the earliest pending message (absent when none is pending).",
        lambda q: q.next_due,
    ),
    (
        "celery_delayq_in_flight",
        "Pending messages claimed by a mover publishing them to another broker.",
        lambda q: q.in_flight,
    ),
    (
        "celery_delayq_dead_letters",
        "Messages the broker kept refusing, kept with the reason (`list --dead`).",
        lambda q: q.dead,
    ),
)

#: Per-queue counters: name, help, and the field of the queue's stats hash.
COUNTERS = (
    ("celery_delayq_scheduled", "Messages stored until their ETA.", "scheduled"),
    ("celery_delayq_moved", "Delayed messages delivered to their queue.", "moved"),
    ("celery_delayq_cancelled", "Pending delayed messages cancelled.", "cancelled"),
    ("celery_delayq_replaced", "Pending keyed messages replaced by a newer one.", "replaced"),
    ("celery_delayq_dropped", "Keyed messages dropped: their key was held (keep).", "dropped"),
    ("celery_delayq_refused", "Keyed messages refused: their key was held (reject).", "refused"),
    ("celery_delayq_dead_lettered", "Messages moved to the dead letters.", "dead"),
)


class DelayqCollector:
    """A prometheus_client collector (``registry.Collector``) reading the store per scrape.

    ``collect`` does not raise when Redis cannot be reached: it then yields only
    ``celery_delayq_up 0``, so the HTTP endpoint keeps answering.
    """

    def __init__(self, app: Celery, alive_within: float | None = None) -> None:
        _require_prometheus()
        self.app = app
        if alive_within is None:
            alive_within = config_of(app).mover_alive_within
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
            families += self._redelivered()
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

        status = read_status(store, self.alive_within)
        labels = ["queue"]
        gauges = [(GaugeMetricFamily(name, doc, labels=labels), read) for name, doc, read in GAUGES]
        counters = [
            (CounterMetricFamily(name, doc, labels=labels), field) for name, doc, field in COUNTERS
        ]
        lateness = HistogramMetricFamily(
            "celery_delayq_move_lateness_seconds",
            "Time from a message's due time to its move, by the Redis clock.",
            labels=labels,
        )
        for queue in status.backlog:
            for gauge, read in gauges:
                value = read(queue)
                if value is not None:
                    gauge.add_metric([queue.queue], value)
            stats = store.stats(queue.queue)
            for counter, field in counters:
                counter.add_metric([queue.queue], stats.get(field, 0))
            lateness.add_metric([queue.queue], *lateness_buckets(stats))
        movers_alive = GaugeMetricFamily(
            "celery_delayq_movers_alive",
            f"Movers whose last heartbeat is at most {self.alive_within:g}s old.",
            value=len(status.alive),
        )
        return [
            *(g for g, _ in gauges),
            *(c for c, _ in counters),
            lateness,
            movers_alive,
            *_periodic(store),
            *_flow_control(store),
        ]

    def _redelivered(self) -> list[Metric]:
        """Messages put back on their queues, per queue: read from a Redis broker (the
        other brokers count their own)."""
        from prometheus_client.core import CounterMetricFamily

        with self.app.connection_for_read() as connection:
            read = getattr(connection.channel(), "redeliveries", None)
            if read is None:
                return []
            counts = read()
        family = CounterMetricFamily(
            "celery_delayq_redelivered",
            "Unacknowledged messages put back on their queue (lease run out, reject with "
            "requeue, channel closed): each runs again.",
            labels=["queue"],
        )
        for queue, count in sorted(counts.items()):
            family.add_metric([queue], count)
        return [family]


#: Per queue and task, its flow-control buckets added up (its limit keys are not told
#: apart: a label per key would make a series per customer): name, help, TaskFlow field.
FLOW_GAUGES = (
    (
        "celery_delayq_flow_buckets",
        "Flow-control buckets of a task (its own and its limit keys').",
        "buckets",
    ),
    ("celery_delayq_flow_keyed_buckets", "Flow-control buckets of a task's limit keys.", "keyed"),
    (
        "celery_delayq_flow_waiting",
        "Messages of a flow-controlled task waiting for its limits to release them.",
        "waiting",
    ),
    (
        "celery_delayq_flow_running",
        "Concurrency slots of a task taken, their leases not run out.",
        "running",
    ),
    (
        "celery_delayq_flow_throttled_buckets",
        "Buckets of a task whose waiting messages may not go yet (rate, slots or hold).",
        "throttled",
    ),
    (
        "celery_delayq_flow_held_buckets",
        "Buckets of a task paused, or held until a time to come.",
        "held",
    ),
)


def _flow_control(store: DelayedStore) -> list[Metric]:
    """Flow control per queue and task (core/store/flow.py reads the buckets)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["queue", "task"]
    gauges = [
        (GaugeMetricFamily(name, doc, labels=labels), field) for name, doc, field in FLOW_GAUGES
    ]
    released = CounterMetricFamily(
        "celery_delayq_flow_released",
        "Messages of a flow-controlled task released to its queue, its limit keys' added up.",
        labels=labels,
    )
    for flow in store.task_flows():
        for gauge, field in gauges:
            gauge.add_metric([flow.queue, flow.task], getattr(flow, field))
        released.add_metric([flow.queue, flow.task], flow.released)
    return [*(g for g, _ in gauges), released]


def _periodic(store: DelayedStore) -> list[Metric]:
    """Per periodic entry: its occurrences run late or missed while every beat was down,
    those skipped while its previous run was going, and when a worker last started one
    of its runs."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    names = [each.entry.name for each in EntryRegistry(store.client, store.keys).all()]
    late = CounterMetricFamily(
        "celery_delayq_periodic_late",
        "Occurrences of a periodic entry missed while every beat was down and run late "
        "(its catch_up).",
        labels=["entry"],
    )
    missed = CounterMetricFamily(
        "celery_delayq_periodic_missed",
        "Occurrences of a periodic entry missed while every beat was down and not run.",
        labels=["entry"],
    )
    skipped = CounterMetricFamily(
        "celery_delayq_periodic_skipped",
        "Occurrences of a periodic entry whose overlap is skip, not run: the entry's "
        "previous run was still going.",
        labels=["entry"],
    )
    last_run = GaugeMetricFamily(
        "celery_delayq_periodic_last_run_timestamp_seconds",
        "When a worker last started a run of a periodic entry (Unix time).",
        labels=["entry"],
    )
    for name, history in EntryHistory(store.client, store.keys).read(names).items():
        late.add_metric([name], history.late)
        missed.add_metric([name], history.missed)
        skipped.add_metric([name], history.skipped)
        if history.last_started is not None:
            last_run.add_metric([name], history.last_started.timestamp())
    return [late, missed, skipped, last_run]


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
    app: Celery, port: int, addr: str = "127.0.0.1", *, alive_within: float | None = None
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
    config = config_of(app)
    if config.metrics_port is None:
        return None
    server, _ = start_exporter(app, config.metrics_port, config.metrics_addr)
    logger.info(
        "celery-delayq: metrics on http://%s:%d/metrics", config.metrics_addr, config.metrics_port
    )
    return server


def _check_app(app: Celery) -> None:
    """Fail at start-up, not at every scrape, on settings that can never work."""
    config_of(app)
    if not uses_delayq(app):
        raise ConfigurationError("the broker transport is not celery-delayq: " + TRANSPORT_HINT)
