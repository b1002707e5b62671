"""The app of RabbitMQ benchmark workers (``celery -A benchmarks.rabbitmq.worker_app``)
and of the orchestrator, configured from the environment:

- ``BENCH_BROKER_URL``: the private node; ``BENCH_RECORD_URL``: the Redis where each
  execution is recorded (and, for celery-delayq, the store: ``delayq_store_url``);
- ``BENCH_SIDE``: ``vanilla`` (kombu's pyamqp transport), ``delayq`` (celery-delayq's
  AMQPTransport) or ``native`` (pyamqp with quorum queues: Celery's native delayed
  delivery);
- ``BENCH_PREFETCH``: ``worker_prefetch_multiplier`` (default 1);
- ``BENCH_MOVE_CALL_BUDGET``: ``delayq_move_call_budget`` (default: the setting's own;
  0: batches of ``delayq_move_batch_size``, 500);
- ``BENCH_QUEUE``: the queue (a quorum queue on a topic exchange for ``native`` and,
  to compare like with like, for ``delayq`` when ``BENCH_QUORUM=1``).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import Celery, signals
from kombu import Exchange, Queue

RECORD_TASK = "bench.record"
RUNS_KEY = "bench:runs"
READY_KEY = "bench:ready"


def make_app(env: dict[str, str] | None = None) -> Celery:
    env = dict(os.environ if env is None else env)
    side, queue = env["BENCH_SIDE"], env["BENCH_QUEUE"]
    app = Celery("bench_rabbitmq", set_as_current=False)
    settings: dict[str, Any] = {
        "broker_url": env["BENCH_BROKER_URL"],
        "task_default_queue": queue,
        # 0: unlimited, so a vanilla worker takes a backlog of ETA tasks at once (with
        # a limit it takes about two a second: each one raises the prefetch by one).
        "worker_prefetch_multiplier": int(env.get("BENCH_PREFETCH", "1")),
        "broker_connection_retry_on_startup": True,
    }
    if side == "delayq":
        settings["broker_transport"] = "celery_delayq.transport:AMQPTransport"
        settings["delayq_store_url"] = env["BENCH_RECORD_URL"]
        if env.get("BENCH_MOVE_CALL_BUDGET"):
            settings["delayq_move_call_budget"] = float(env["BENCH_MOVE_CALL_BUDGET"])
    if side == "native" or env.get("BENCH_QUORUM") == "1":
        exchange = Exchange(queue, type="topic")
        quorum = {"x-queue-type": "quorum"}
        settings["task_queues"] = [
            Queue(queue, exchange, routing_key=queue, queue_arguments=quorum)
        ]
        settings["broker_transport_options"] = {"confirm_publish": True}
    app.conf.update(settings, bench_record_url=env["BENCH_RECORD_URL"])
    app.task(name=RECORD_TASK, bind=True)(record)
    return app


def record(self: Any) -> None:
    """The benchmark task: note its id, its ETA and when it started."""
    eta = self.request.eta or self.request.get("x-delayq-eta")  # delayq: the latter
    entry = {"id": self.request.id, "at": time.time(), "eta": eta}
    with redis.Redis.from_url(self.app.conf.bench_record_url) as client:
        client.rpush(RUNS_KEY, json.dumps(entry, default=str))


if os.environ.get("BENCH_SIDE"):
    app = make_app()

    @signals.worker_ready.connect(weak=False)
    def _announce_ready(**_: Any) -> None:
        with redis.Redis.from_url(os.environ["BENCH_RECORD_URL"]) as client:
            client.sadd(READY_KEY, os.getpid())
