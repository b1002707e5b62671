"""A task for the Django tests' workers (``CELERY_IMPORTS`` of settings_admin_beat.py): each
run is recorded under ``test:runs`` in the tests' Redis, as tests/worker_app.py's tasks
record theirs, with the occurrence and entry it stands for (or django-celery-beat's
``periodic_task_name``), so ``tests.helpers.runs`` reads them."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import shared_task


@shared_task(bind=True)
def tick(self: Any) -> None:
    request = self.request
    run = {
        "id": request.id,
        "at": time.time(),
        "occurrence": request.get("delayq-occurrence"),
        "entry": request.get("delayq-periodic"),
        "periodic_task_name": request.get("periodic_task_name"),
    }
    with redis.Redis.from_url(os.environ["REDIS_URL"]) as client:
        client.rpush("test:runs", json.dumps(run))
