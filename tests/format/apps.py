"""The Celery apps whose stores the format fixtures hold, and the one task they send.

One Redis server serves every app, each in databases of its own (the numbers are part
of the fixture); a RabbitMQ vhost serves the AMQP app. ``make_app`` builds the same app
for the generator (make_fixtures.py) and for the test's workers (worker.py), so both
agree on queues, settings and the task.

- ``own``: a Redis broker keeping its delayed store in its own Redis (db 0).
- ``prefixed``: the same under kombu's ``global_keyprefix`` and another
  ``delayq_key_prefix`` (db 4).
- ``separate``: a Redis broker (db 1) with the store elsewhere (``delayq_store_url``,
  db 2) in 3 shards; due messages reach the broker's lists through the hand-over.
- ``amqp``: a RabbitMQ broker with the store at ``delayq_store_url`` (db 3).
"""

from __future__ import annotations

from typing import Any

import redis
from celery import Celery
from kombu import Exchange, Queue

from celery_delayq.testing import build_app

#: The task every fixture message runs: it appends its label to ``RAN`` in ``RESULTS_DB``.
TASK = "format.record"
RAN = "format:ran"
RESULTS_DB = 15
KINDS = ("own", "prefixed", "separate", "amqp")

#: x-expires of the ``own`` app's expiring queue (ms); long, so it never expires in a run.
EXPIRES_MS = 600_000
#: Where the ``amqp`` app's dead letter was sent: an exchange missing when it was due.
MISSING_EXCHANGE = "format-missing"
#: The ``separate`` app's dead letter's queue: its list key held a string when it was
#: due (the fixture keeps that string; the test deletes it before resending).
BLOCKED = "fx-sep-blocked"


def queues(kind: str, *, with_dead: bool = True) -> list[Queue]:
    """The queues of an app; ``with_dead``: also the queue behind the missing exchange
    (the generator leaves it out, so that the exchange stays missing)."""
    if kind == "own":
        return [
            Queue("fx-own"),
            Queue("fx-own-expiring", queue_arguments={"x-expires": EXPIRES_MS}),
        ]
    if kind == "prefixed":
        return [Queue("fx-pre")]
    if kind == "separate":
        return [Queue("fx-sep"), Queue("fx-sep-inflight"), Queue(BLOCKED)]
    dead = Queue("fx-dead", Exchange(MISSING_EXCHANGE, type="direct"), routing_key="fx-dead")
    return [Queue("fx-amqp"), Queue("fx-amqp-inflight"), *([dead] if with_dead else [])]


def settings(kind: str, redis_url: str, amqp_url: str) -> dict[str, Any]:
    """``redis_url``: the server without a database (redis://host:port)."""
    common = {"task_queues": queues(kind), "task_default_queue": queues(kind)[0].name}
    if kind == "own":
        return {
            **common,
            "broker_url": f"{redis_url}/0",
            "broker_transport": "celery_delayq.transport:Transport",
        }
    if kind == "prefixed":
        return {
            **common,
            "broker_url": f"{redis_url}/4",
            "broker_transport": "celery_delayq.transport:Transport",
            "broker_transport_options": {"global_keyprefix": "fx:"},
            "delayq_key_prefix": "fxq",
        }
    if kind == "separate":
        return {
            **common,
            "broker_url": f"{redis_url}/1",
            "broker_transport": "celery_delayq.transport:Transport",
            "delayq_store_url": f"{redis_url}/2",
            "delayq_store_shards": 3,
        }
    return {
        **common,
        "broker_url": amqp_url,
        "broker_transport": "celery_delayq.transport:AMQPTransport",
        "delayq_store_url": f"{redis_url}/3",
    }


def make_app(kind: str, redis_url: str, amqp_url: str = "", **overrides: Any) -> Celery:
    """The app of one kind, with its task; ``overrides``: further Celery settings."""
    app = build_app(
        f"format-{kind}",
        {
            **settings(kind, redis_url, amqp_url),
            "broker_connection_retry_on_startup": True,
            "worker_hijack_root_logger": False,
            **overrides,
        },
        current=True,
    )
    results = f"{redis_url}/{RESULTS_DB}"

    @app.task(name=TASK, shared=False)
    def record(label: str) -> None:
        with redis.Redis.from_url(results) as client:
            client.rpush(RAN, label)

    return app
