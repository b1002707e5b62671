"""Celery settings of the example project: plain Celery settings, nothing else.

Two lines make countdown/ETA tasks wait in Redis instead of in worker memory:
``broker_url`` must be a ``redis://`` URL, and ``broker_transport`` names the
celery-delayq transport. Everything else is ordinary Celery configuration.
"""

import os

broker_url = os.environ.get("REDIS_URL", "redis://localhost:6379/0")
broker_transport = "celery_delayq.transport:Transport"

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
