"""A bare mover process for fault tests:
``python -m tests.core.moving.mover_process PORT BATCH``."""

from __future__ import annotations

import sys
import threading

import redis

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.moving.mover import Mover
from celery_delayq.core.store import DelayedStore


def main(port: int, batch: int) -> None:
    def connect() -> DelayedStore:
        return DelayedStore(redis.Redis(port=port), KeySpace(), batch)

    print("ready", flush=True)  # imported: the test starts watching its progress now
    Mover(connect, max_sleep=0.2, retry_max=1).run(threading.Event())


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
