"""Publishing from several processes, so the producer is not what limits a scenario.

One Python process publishes a few thousand tasks a second; a steady stream of
1,000 tasks/s falling due, on top of the workers, needs the publishing spread out.
Each publisher builds the run's own Celery app (same settings, same transport) from
the ``RunConfig``, exactly as the orchestrator does.
"""

from __future__ import annotations

import multiprocessing
import time
from datetime import datetime, timezone
from typing import Optional

from .app import PUBLISHED_HEADER, RECORD_TASK, make_app
from .runconfig import RunConfig

#: (when to publish, ETA), both epoch seconds; no ETA: published as an ordinary task
#: (the physical limit: the task then records its start - its publish time).
Send = tuple[float, Optional[float]]


def _publish(config: RunConfig, sends: list[Send]) -> None:
    app = make_app(config)
    app.set_current()  # celery-delayq's channel reads the current app's settings
    task = app.tasks[RECORD_TASK]
    with app.producer_or_acquire() as producer:
        for publish_at, eta in sends:
            wait = publish_at - time.time()
            if wait > 0:
                time.sleep(wait)
            if eta is None:
                task.apply_async(headers={PUBLISHED_HEADER: time.time()}, producer=producer)
            else:
                task.apply_async(eta=datetime.fromtimestamp(eta, timezone.utc), producer=producer)
    app.close()


def publish_parallel(config: RunConfig, sends: list[Send], processes: int) -> None:
    """Publish every send, spread round-robin over ``processes`` spawned processes.

    Sorted sends stay sorted within each process, so each keeps to its timetable.
    """
    ordered = sorted(sends, key=lambda send: send[0])
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_publish, args=(config, ordered[i::processes]), daemon=True)
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    failed = [w.exitcode for w in workers if w.exitcode != 0]
    if failed:
        raise RuntimeError(f"publisher processes exited with {failed}")
