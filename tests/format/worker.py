"""``celery -A tests.format.worker worker``: the app of kind ``FORMAT_APP`` (apps.py), on
the Redis at ``FORMAT_REDIS`` (redis://host:port) and the RabbitMQ at ``FORMAT_AMQP``."""

from __future__ import annotations

import os

from .apps import make_app

app = make_app(
    os.environ["FORMAT_APP"], os.environ["FORMAT_REDIS"], os.environ.get("FORMAT_AMQP", "")
)
