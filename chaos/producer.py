"""A producer process: schedules ``chaos.work`` tasks at a steady rate until SIGTERM.

``python -m chaos.producer RATE SEED LAST_ETA``. Each task gets a countdown (or, half the
time, an absolute ``eta``) drawn log-uniformly from 0.1 s to the run's longest
countdown, and a plan of zero to two retries with countdowns from the same range; no
ETA falls after ``LAST_ETA`` (epoch seconds), so the run's final drain stays short. A
task id enters the ledger as scheduled only once ``apply_async`` returned; a publish
that raised is noted as failed (it may still have been stored: Redis can apply a
command whose reply never arrives).
"""

from __future__ import annotations

import math
import random
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

from .app import TASK_NAME, publishing
from .config import MIN_COUNTDOWN, RETRY_WEIGHTS, capped_countdown
from .ledger import process_ledger

#: Producing is this far behind schedule at most; beyond, it skips ahead instead of bursting.
MAX_BACKLOG_SECONDS = 1.0


def draw_countdown(rng: random.Random, longest: float) -> float:
    """Log-uniform from 0.1 s to ``longest``: as many sub-second as multi-minute tasks."""
    return math.exp(rng.uniform(math.log(MIN_COUNTDOWN), math.log(longest)))


def draw_plan(rng: random.Random, longest: float) -> list[float]:
    retries = rng.choices(range(len(RETRY_WEIGHTS)), weights=RETRY_WEIGHTS)[0]
    return [round(draw_countdown(rng, longest), 3) for _ in range(retries)]


def produce(rate: float, seed: int, last_eta: float, stop: threading.Event) -> None:
    from .celery_app import app, settings

    task = app.tasks[TASK_NAME]
    ledger = process_ledger()
    rng = random.Random(seed)
    interval = 1.0 / rate
    next_at = time.monotonic()
    while not stop.is_set():
        countdown = capped_countdown(draw_countdown(rng, settings.max_countdown), last_eta)
        plan = draw_plan(rng, settings.max_countdown)
        task_id = str(uuid.uuid4())
        eta = datetime.now(timezone.utc) + timedelta(seconds=countdown)
        token = publishing.set((task_id, 0))
        try:
            if rng.random() < 0.5:
                task.apply_async((plan, last_eta), task_id=task_id, eta=eta)
            else:
                task.apply_async((plan, last_eta), task_id=task_id, countdown=countdown)
        except Exception as exc:
            ledger.write("F", id=task_id, e=f"{type(exc).__name__}: {exc}"[:200])
        else:
            ledger.write("S", id=task_id, eta=eta.timestamp(), n=len(plan))
        finally:
            publishing.reset(token)
        next_at = max(next_at + interval, time.monotonic() - MAX_BACKLOG_SECONDS)
        stop.wait(max(0.0, next_at - time.monotonic()))


def main(argv: list[str]) -> None:
    rate, seed, last_eta = float(argv[0]), int(argv[1]), float(argv[2])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    produce(rate, seed, last_eta, stop)


if __name__ == "__main__":
    main(sys.argv[1:])
