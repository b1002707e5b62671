"""The worker-side mover: a worker bootstep running a Mover in a background thread.

The mover has its own Redis connections and thread, so moving never runs on the
worker's event loop and cannot stall message consumption. It is a worker (not a
consumer) step, so a broker reconnect does not restart it; a Redis outage is
handled inside the mover by back-off and retry.
"""

from __future__ import annotations

import encodings.idna  # noqa: F401 - imported by the first connect; see WorkerMover.requires
import socket
from typing import Any

from celery import bootsteps

from ..brokers.connect import log_startup, mover_thread
from ..config.settings import config_of
from ..core.moving.mover import MoverThread
from ..metrics import start_configured_exporter

WORKER_MOVES = "this worker moves due messages"
WORKER_DOES_NOT_MOVE = (
    "worker mover off (delayq_worker_mover): run beat with celery_delayq.beat:Scheduler "
    "or `celery delayq mover`"
)


class WorkerMover(bootsteps.StartStopStep):
    """Moves due delayed messages for as long as the worker runs (``delayq_worker_mover``)."""

    label = "celery-delayq mover"
    #: Start only once the pool has forked its children: forking while the mover thread
    #: holds a lock (an import's, say) would leave a child deadlocked on that lock.
    requires = ("celery.worker.components:Pool",)

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.moves = config_of(worker.app).worker_mover
        self.exporter: Any = None
        super().__init__(worker, **kwargs)

    def create(self, worker: Any) -> MoverThread | None:
        """The service object; StartStopStep starts and stops it with the worker."""
        if not self.moves:
            return None
        return mover_thread(worker.app, f"worker mover {socket.gethostname()}")

    def start(self, worker: Any) -> None:
        """Log the start-up line (logging is set up by now), then start moving."""
        log_startup(worker.app, WORKER_MOVES if self.moves else WORKER_DOES_NOT_MOVE)
        super().start(worker)
        self.exporter = start_configured_exporter(worker.app)

    def stop(self, worker: Any) -> None:
        if self.exporter is not None:
            self.exporter.shutdown()
            self.exporter = None
        super().stop(worker)

    shutdown = stop
