"""The chaos run's app, its task and its producer, configured from ``CHAOS_RMQ`` (JSON:
broker_url, store_url, ledger_dir, max_countdown, lease; on a cluster also shards and
wait_replicas)."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

from celery import Celery

from celery_delayq.testing import AMQP_TRANSPORT, LedgerWriter, build_app

ENV = "CHAOS_RMQ"
ENV_INCARNATION = "CHAOS_INCARNATION"
TASK = "chaos.rmq_work"
QUEUE = "chaos-rmq"


def settings() -> dict[str, Any]:
    return json.loads(os.environ[ENV])


def ledger() -> LedgerWriter:
    return LedgerWriter(settings()["ledger_dir"], os.environ.get(ENV_INCARNATION, "unknown"))


def make_app() -> Celery:
    config = settings()
    app = build_app(
        "chaos_rmq",
        {
            "broker_url": config["broker_url"],
            "broker_transport": AMQP_TRANSPORT,
            "broker_transport_options": {"confirm_publish": True},
            "broker_connection_retry_on_startup": True,
            "broker_connection_max_retries": None,
            "delayq_store_url": config["store_url"],
            "delayq_store_shards": config.get("shards", 1),
            "delayq_store_wait_replicas": config.get("wait_replicas", 0),
            "delayq_handover_lease": config["lease"],
            "delayq_mover_retry_max": 2.0,
            "task_default_queue": QUEUE,
            "task_acks_late": True,
            "task_ignore_result": True,
            "worker_prefetch_multiplier": 4,
            "worker_enable_remote_control": False,
            "beat_schedule_filename": os.path.join(config["ledger_dir"], "..", "beat-schedule"),
        },
    )
    app.task(name=TASK, bind=True)(work)
    return app


def work(self: Any) -> None:
    """Note the run's begin and end, with what tells a redelivery from a second publish."""
    request = self.request
    writer = ledger()
    fields = {
        "id": request.id,
        "xid": request.get("x-delayq-id"),
        "rd": bool((request.delivery_info or {}).get("redelivered")),
        "pid": os.getpid(),
    }
    writer.write("B", **fields)
    writer.write("E", **fields)


def produce(rate: float, duration: float) -> None:
    """Send ``rate`` tasks a second for ``duration`` seconds, countdowns 0.1 s up to
    ``max_countdown``; note each once ``apply_async`` returned (and each publish retry)."""
    config = settings()
    app = make_app()
    app.set_current()
    task = app.tasks[TASK]
    writer = ledger()
    rng = random.Random(os.getpid())
    end = time.time() + duration
    current: dict[str, str] = {}

    def on_retry(exc: BaseException, _interval: float) -> None:
        writer.write("P", id=current.get("id"), e=f"{type(exc).__name__}: {exc}"[:200])

    policy = {
        "max_retries": 100,
        "interval_start": 0.2,
        "interval_step": 0.2,
        "interval_max": 1.0,
        "errback": on_retry,
    }
    while time.time() < end:
        started = time.time()
        countdown = rng.uniform(0.1, config["max_countdown"])
        task_id = f"t{int(started * 1000)}-{rng.randrange(1 << 30)}"
        current["id"] = task_id
        try:
            task.apply_async(task_id=task_id, countdown=countdown, retry=True, retry_policy=policy)
        except Exception as exc:  # noqa: BLE001 - noted: the message may or may not exist
            writer.write("F", id=task_id, e=f"{type(exc).__name__}: {exc}"[:200])
        else:
            writer.write("S", id=task_id, eta=started + countdown)
        time.sleep(max(0.0, 1 / rate - (time.time() - started)))


if os.environ.get(ENV):
    app = make_app()

if __name__ == "__main__":
    produce(float(sys.argv[1]), float(sys.argv[2]))
