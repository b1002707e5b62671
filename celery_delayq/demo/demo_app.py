"""The packaged demo's Celery app: ``celery -A celery_delayq.demo.demo_app worker`` finds it.

Its settings are those of a real project on celery-delayq: a ``redis://`` broker URL
and the celery-delayq transport (on RabbitMQ, ``BROKER_URL=amqp://...``: the AMQP
transport, with ``delayq_store_url`` naming the Redis where delayed tasks wait). The demo
sets ``REDIS_URL`` for its worker; the default is only a placeholder.
"""

from __future__ import annotations

import os

from celery import Celery

from . import DEMO_QUEUE

REDIS_URL = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
BROKER_URL = os.environ.get("BROKER_URL") or REDIS_URL

app = Celery("celery_delayq.demo", include=["celery_delayq.demo.demo_tasks"])
app.conf.update(
    broker_url=BROKER_URL,
    broker_transport="celery_delayq.transport:Transport",
    # Where the tasks note when they started (the demo's own setting, not Celery's).
    demo_redis_url=REDIS_URL,
    # Every worker runs a mover thread (the default, spelled out).
    delayq_worker_mover=True,
    task_default_queue=DEMO_QUEUE,
    # The demo reads start times from Redis itself; no result backend is needed.
    task_ignore_result=True,
    timezone="UTC",
    enable_utc=True,
)
if BROKER_URL.startswith("amqp"):
    app.conf.update(
        broker_transport="celery_delayq.transport:AMQPTransport", delayq_store_url=REDIS_URL
    )
