"""A bare mover process for fault tests: ``python -m tests.mover_process PORT BATCH``."""

from __future__ import annotations

import sys
import threading

import redis

from celery_delayq.keys import KeySpace
from celery_delayq.mover import Mover
from celery_delayq.store import DelayedStore


def main(port: int, batch: int) -> None:
    def connect() -> DelayedStore:
        return DelayedStore(redis.Redis(port=port), KeySpace(), batch)

    print("ready", flush=True)  # imported: the test's kill timer starts now
    Mover(connect, max_sleep=0.2, retry_max=1).run(threading.Event())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
