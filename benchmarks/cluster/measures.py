"""What the cluster benchmark measures on one store: the scheduling rate of two publisher
processes, the drain rate of one mover into a Redis broker's lists, Redis memory per
pending message and Redis CPU per moved message."""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Sequence

import kombu
import redis

from celery_delayq.brokers.redis.list_publisher import RedisListPublisher
from celery_delayq.core.store import Scheduled

from ..processes import redis_cpu_seconds
from .stores import RunningStore, StoreSetup, store_on

QUEUE = "bench"


def envelope(task_id: str) -> bytes:
    """A kombu message of about 240 bytes, as Celery would publish a small task."""
    return json.dumps(
        {
            "body": "W1sxLCAyXSwge30sIHsiY2FsbGJhY2tzIjogbnVsbH1d",
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": "bench.task", "id": task_id, "retries": 0},
            "properties": {"delivery_tag": task_id, "priority": 0},
        }
    ).encode()


def messages(first: int, count: int, due_ms: int) -> list[Scheduled]:
    return [
        Scheduled(QUEUE, f"m{i}", f"task-{i}", due_ms, QUEUE, envelope(f"task-{i}"))
        for i in range(first, first + count)
    ]


def _publish(setup: StoreSetup, url: str, first: int, count: int, ready, go) -> None:
    """One publisher process: ``count`` schedule calls, one at a time (as apply_async
    writes them), once every publisher is ready."""
    store = store_on(setup, url)
    batch = messages(first, count, store.server_time_ms() + 3_600_000)
    ready.put(True)
    go.wait()
    for message in batch:
        store.schedule(message)


def schedule_rate(running: RunningStore, count: int, processes: int = 2) -> float:
    """Messages scheduled per second by ``processes`` publisher processes together."""
    context = multiprocessing.get_context("spawn")
    ready, go = context.Queue(), context.Event()
    share = count // processes
    workers = [
        context.Process(
            target=_publish, args=(running.setup, running.url, i * share, share, ready, go)
        )
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.get(timeout=120)
    start = time.perf_counter()
    go.set()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError(f"a publisher failed with exit code {worker.exitcode}")
    return share * processes / (time.perf_counter() - start)


def memory_per_message(running: RunningStore, count: int) -> float:
    """Redis memory (all masters) per pending message, over an empty store."""
    before = sum(running.used("memory", "used_memory"))
    store = running.store()
    store.schedule_many(messages(0, count, store.server_time_ms() + 3_600_000))
    return (sum(running.used("memory", "used_memory")) - before) / count


def drain(
    running: RunningStore, broker: redis.Redis, broker_url: str, count: int
) -> dict[str, float]:
    """``count`` due messages handed over by one mover (claim, push, ack) into a Redis
    broker's list: messages per second, and CPU per message in microseconds: the
    store's Redis (all masters, and the busiest one), the mover (this process) and the
    broker's Redis."""
    publisher = RedisListPublisher(lambda: kombu.Connection(broker_url))
    store = running.store(publisher)
    store.schedule_many(messages(0, count, store.server_time_ms() - 1))
    cpu_before = _cpu(running)
    broker_before = redis_cpu_seconds(broker)
    mover_before = time.process_time()
    start = time.perf_counter()
    moved = 0
    while moved < count:
        result = store.move_all_due()
        moved += result.moved
        if not result.moved:
            raise RuntimeError(f"the mover stalled at {moved} of {count}")
    seconds = time.perf_counter() - start
    mover = time.process_time() - mover_before
    broker_spent = redis_cpu_seconds(broker) - broker_before
    spent = [after - before for after, before in zip(_cpu(running), cpu_before)]
    publisher.close()
    return {
        "rate": count / seconds,
        "cpu_us": sum(spent) / count * 1e6,
        "busiest_cpu_us": max(spent) / count * 1e6,
        "mover_cpu_us": mover / count * 1e6,
        "broker_cpu_us": broker_spent / count * 1e6,
    }


def _cpu(running: RunningStore) -> Sequence[float]:
    user = running.used("cpu", "used_cpu_user")
    system = running.used("cpu", "used_cpu_sys")
    return [u + s for u, s in zip(user, system)]
