"""The one factory of the Celery apps of the tests, the benchmarks, the chaos harness and
the demo: an app on celery-delayq's transport with the caller's settings."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery

#: The ``broker_transport`` settings of celery-delayq's transports.
TRANSPORT = "celery_delayq.transport:Transport"
AMQP_TRANSPORT = "celery_delayq.transport:AMQPTransport"
SQS_TRANSPORT = "celery_delayq.transport:SQSTransport"


def build_app(
    name: str,
    settings: Mapping[str, Any],
    *,
    current: bool = False,
    include: Iterable[str] = (),
) -> Celery:
    """A Celery app called ``name`` with ``settings`` (``broker_url`` among them), on
    celery-delayq's Redis transport unless they name another ``broker_transport``
    (None: kombu's own for the URL, as an app without celery-delayq).

    ``current``: made Celery's current app (the transport's channel takes its delayq
    settings from it). ``include``: task modules a worker imports.
    """
    app = Celery(name, set_as_current=current, include=list(include) or None)
    app.conf.update({"broker_transport": TRANSPORT, **settings})
    return app
