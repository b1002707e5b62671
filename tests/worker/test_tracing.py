"""OpenTelemetry trace continuity across a delay, with ``opentelemetry-instrumentation-celery``.

The test process publishes a task 2 s ahead while instrumented (its spans go to
memory); a real instrumented ``celery worker`` (tests/worker/tracing_worker.py, its
spans to a file) runs it after the message waited in the delayed store and a mover
handed it over: on the Redis broker, to RabbitMQ and to SQS. The worker's ``run`` span
must be a child of the producer's ``apply_async`` span, in the same trace, which holds
only if the ``traceparent`` header the producer injected reaches the worker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import celery_delayq

pytest.importorskip(
    "opentelemetry.instrumentation.celery",
    reason="needs opentelemetry-instrumentation-celery (the test extra)",
)
pytest.importorskip("opentelemetry.sdk", reason="needs opentelemetry-sdk (the test extra)")

from celery import Celery  # noqa: E402 - after the skips
from opentelemetry.instrumentation.celery import CeleryInstrumentor  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

from celery_delayq.brokers.connect import open_store  # noqa: E402
from celery_delayq.testing import publish, wait_until  # noqa: E402

from ..helpers import REMEMBER, WatchedProcess, celery_process, runs  # noqa: E402
from .tracing_worker import SPANS_FILE, span_record  # noqa: E402

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.timeout(120)]

#: Seconds of delay: long enough that the message waits in the store and a mover hands
#: it over.
DELAY = 2.0
#: The Celery ``imports`` that make a tests.worker_app worker trace itself.
TRACED = {"imports": ["tests.worker.tracing_worker"]}


@pytest.fixture
def producer_spans() -> Iterator[InMemorySpanExporter]:
    """This process instrumented as a producer, its spans kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield exporter
    instrumentor.uninstrument()


@pytest.fixture
def worker_spans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file a worker started in this test writes its spans to (one JSON per line)."""
    path = tmp_path / "worker-spans.jsonl"
    monkeypatch.setenv(SPANS_FILE, str(path))
    return path


def send_delayed(app: Celery) -> datetime:
    """Send ``tests.worker_app.remember`` ``DELAY`` from now by name, as a producer
    without the task's code does; return its ETA."""
    eta = datetime.now(timezone.utc) + timedelta(seconds=DELAY)
    publish(app, REMEMBER, "traced", eta=eta)
    return eta


def known_to_the_producer(app: Celery) -> Any:
    """``tests.worker_app.remember`` as a task of ``app`` (for ``debounce``)."""

    @app.task(name=REMEMBER, shared=False)
    def remember(label: str = "") -> None:
        """Run by the worker only (tests.worker_app)."""

    return remember


def run_spans(path: Path) -> list[dict[str, Any]]:
    """The ``run`` spans the worker exported so far, oldest first."""
    if not path.exists():
        return []
    spans = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [span for span in spans if span["name"] == f"run/{REMEMBER}"]


def assert_run_continues_the_trace(
    app: Celery,
    worker: WatchedProcess,
    producer_spans: InMemorySpanExporter,
    worker_spans: Path,
) -> None:
    """The worker's run span is the child of the producer's apply_async span, starts
    at the ETA or later, and the message went through the delayed store."""
    eta = send_delayed(app)
    [published] = [
        span_record(span)
        for span in producer_spans.get_finished_spans()
        if span.name == f"apply_async/{REMEMBER}"
    ]
    [run] = wait_until(
        lambda: run_spans(worker_spans),
        timeout=30,
        what="the worker's run span",
        abort=worker.exited,
    )
    assert run["trace_id"] == published["trace_id"], (published, run)
    assert run["parent_id"] == published["span_id"], (published, run)
    assert run["start"] >= eta.timestamp() * 1e9, (eta, run)
    wait_until(lambda: stored_and_moved(app) == (1, 1), timeout=10, what="1 stored, 1 moved")


def stored_and_moved(app: Celery) -> tuple[int, int]:
    """How many messages of the app's queue the delayed store took, and how many a mover
    handed over (on RabbitMQ, counted once the broker confirmed: maybe after the run)."""
    with open_store(app) as store:
        stats = store.stats(app.conf.task_default_queue)
    return stats.get("scheduled", 0), stats.get("moved", 0)


def test_redis_broker_run_span_continues_the_producers_trace(
    make_app, redis_server, redis_client, producer_spans, worker_spans
):
    """Also for a debounced task: the run continues the trace of the call whose
    message the store kept (with ``replace``, the last one)."""
    app = make_app()
    with celery_process("worker", redis_server.url, TRACED, "-P", "solo") as worker:
        assert_run_continues_the_trace(app, worker, producer_spans, worker_spans)

        producer_spans.clear()
        task = known_to_the_producer(app)
        for label in ("first", "last"):
            celery_delayq.debounce(task, (label,), key="k", countdown=DELAY)
        first, last = [span_record(span) for span in producer_spans.get_finished_spans()]
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=30, abort=worker.exited)
        run = wait_until(lambda: run_spans(worker_spans)[1:], timeout=10)[0]

    assert [r["label"] for r in runs(redis_client)] == ["traced", "last"]
    assert first["trace_id"] != last["trace_id"]
    assert (run["trace_id"], run["parent_id"]) == (last["trace_id"], last["span_id"])


def test_rabbitmq_handover_run_span_continues_the_producers_trace(
    make_amqp_app, amqp_settings, rabbitmq_url, redis_server, producer_spans, worker_spans
):
    app = make_amqp_app()
    settings = {**amqp_settings, **TRACED}
    with celery_process(
        "worker", rabbitmq_url, settings, "-P", "solo", record_url=redis_server.url
    ) as worker:
        assert_run_continues_the_trace(app, worker, producer_spans, worker_spans)


def test_sqs_handover_run_span_continues_the_producers_trace(
    make_sqs_app, sqs_server, redis_server, producer_spans, worker_spans
):
    app = make_sqs_app()
    settings = {
        **{key: app.conf[key] for key in ("delayq_store_url", "task_default_queue")},
        "broker_transport": app.conf.broker_transport,
        "broker_transport_options": {
            **app.conf.broker_transport_options,
            "polling_interval": 0.1,
            "wait_time_seconds": 0,
        },
        **TRACED,
    }
    with celery_process(
        "worker", sqs_server, settings, "-P", "solo", record_url=redis_server.url
    ) as worker:
        assert_run_continues_the_trace(app, worker, producer_spans, worker_spans)
