"""Movers in processes of their own, as they run beside real workers.

Two kinds: ``Mover`` itself (the loop workers run: sleep until due or woken, then
move), for the burst; and a bare ``move_all_due()`` loop that starts on a signal
and stops when the store is empty, for the scale-out drain, where several start at
the same instant and each reports how much it moved.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import threading
import time
from multiprocessing.process import BaseProcess
from typing import Any

import redis

from celery_delayq.core.moving.mover import Mover
from celery_delayq.testing import wait_until

from .store_tools import make_store

_SPAWN = multiprocessing.get_context("spawn")


def _run_mover(url: str, batch_size: int, call_budget: float) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    mover = Mover(
        lambda: make_store(url, batch_size, call_budget),
        max_sleep=5.0,
        retry_max=1.0,
        name="bench",
    )
    mover.run(stop)


def start_mover(url: str, batch_size: int, call_budget: float = 0.0) -> BaseProcess:
    """A ``celery_delayq.core.moving.mover.Mover`` in its own process; stop it with ``stop``.
    ``call_budget``: ``delayq_move_call_budget`` (0: batches of exactly ``batch_size``)."""
    process = _SPAWN.Process(target=_run_mover, args=(url, batch_size, call_budget), daemon=True)
    process.start()
    return process


def stop(process: BaseProcess, timeout: float = 10.0) -> None:
    process.terminate()  # SIGTERM: the mover finishes its pass and says goodbye
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()


def _drain(url: str, queue: str, go_key: str, result_key: str, batch_size: int) -> None:
    store = make_store(url, batch_size)
    store.server_time_ms()  # connect and load nothing lazily after the start signal
    store.client.blpop([go_key])
    started = time.perf_counter()
    moved = calls = 0
    while True:
        result = store.move_all_due()
        moved += result.moved
        calls += 1
        if result.moved == 0 and store.client.hlen(store.keys.for_queue(queue).messages) == 0:
            break
    report: dict[str, Any] = {"moved": moved, "seconds": time.perf_counter() - started}
    store.client.rpush(result_key, json.dumps(report))


def drain(url: str, queue: str, movers: int, batch_size: int = 500) -> list[dict[str, Any]]:
    """Start ``movers`` drain loops at the same instant; each one's moved count and seconds.

    The processes connect first and then block on one list, so none gets a head start
    from process start-up.
    """
    client = redis.Redis.from_url(url)
    go_key, result_key = f"bench:go:{queue}", f"bench:drained:{queue}"
    client.delete(go_key, result_key)
    processes = [
        _SPAWN.Process(
            target=_drain, args=(url, queue, go_key, result_key, batch_size), daemon=True
        )
        for _ in range(movers)
    ]
    for process in processes:
        process.start()
    try:
        _wait_blocked(client, movers)
        client.rpush(go_key, *["go"] * movers)
        reports = [json.loads(_pop(client, result_key, timeout=600)) for _ in processes]
    finally:
        for process in processes:
            stop(process)
    return reports


def _pop(client: redis.Redis, key: str, timeout: float) -> bytes:
    """BLPOP in short waits: redis-py's socket timeout would cut one long wait short."""
    popped = wait_until(
        lambda: client.blpop([key], timeout=1), timeout=timeout, interval=0, what="a drain report"
    )
    return bytes(popped[1])


def _wait_blocked(client: redis.Redis, count: int, timeout: float = 60.0) -> None:
    wait_until(
        lambda: int(client.info("clients")["blocked_clients"]) >= count,
        timeout=timeout,
        interval=0.02,
        what=f"{count} drain movers started",
    )
