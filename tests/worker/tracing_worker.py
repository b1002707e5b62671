"""OpenTelemetry for a ``tests.worker_app`` worker in the tracing tests.

The tests add this module to the worker's Celery ``imports``: the worker imports it when
it starts, before its pool exists, and the pool's ``worker_process_init`` (sent by the
solo pool too) sets up tracing as the instrumentation asks: in the process that runs
tasks, after it started. Every span ends up as one JSON line in the file named by
``DELAYQ_TEST_SPANS_FILE``, which the test process reads.
"""

from __future__ import annotations

import json
import os
from typing import Any

from celery.signals import worker_process_init
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

#: The environment variable naming the file the worker's spans go to.
SPANS_FILE = "DELAYQ_TEST_SPANS_FILE"


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """What the tests compare of a span: its name, ids (hex, as in ``traceparent``),
    parent and times (ns since the epoch)."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "trace_id": trace.format_trace_id(context.trace_id),
        "span_id": trace.format_span_id(context.span_id),
        "parent_id": trace.format_span_id(span.parent.span_id) if span.parent else None,
        "start": span.start_time,
        "end": span.end_time,
    }


@worker_process_init.connect(weak=False)
def start_tracing(**_: Any) -> None:
    """Export each span as it ends (SimpleSpanProcessor: no batching thread to lose).

    Nothing without ``DELAYQ_TEST_SPANS_FILE``: the test process imports this module too
    (``span_record``), and other tests run solo workers in their own process."""
    path = os.environ.get(SPANS_FILE)
    if not path:
        return
    out = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open while the process lives
    exporter = ConsoleSpanExporter(out=out, formatter=lambda s: json.dumps(span_record(s)) + "\n")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    CeleryInstrumentor().instrument(tracer_provider=provider)
