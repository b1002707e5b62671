"""Celery settings of the example project: plain Celery settings, nothing else.

Two lines make countdown/ETA tasks wait in Redis instead of in worker memory:
``broker_url`` a ``redis://`` URL, and ``broker_transport`` naming the celery-delayq
transport. On RabbitMQ (``BROKER_URL=amqp://...``) it is three: the AMQP transport,
and ``delayq_store_url``, the Redis where delayed tasks wait. Everything else is
ordinary Celery configuration.
"""

import os

redis_url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
broker_url = os.environ.get("BROKER_URL") or redis_url
if broker_url.startswith("amqp"):
    broker_transport = "celery_delayq.transport:AMQPTransport"
    delayq_store_url = redis_url
else:
    broker_transport = "celery_delayq.transport:Transport"

# Where the demo's tasks note when they started (a setting of this project, not Celery's).
demo_redis_url = redis_url

# Every worker runs a mover thread (the default, spelled out here); alternatively run
# `celery beat` with beat_scheduler = "celery_delayq.beat:Scheduler".
delayq_worker_mover = True

# Its own queue, so the demo never competes with other workers on a shared Redis.
task_default_queue = "delayq_demo"

# The demo reads task start times from Redis itself; no result backend is needed.
task_ignore_result = True

# A naive eta= is read in this zone, by workers and by celery-delayq alike.
timezone = "UTC"
enable_utc = True
