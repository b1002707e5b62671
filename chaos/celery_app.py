"""The module ``celery -A chaos.celery_app ...`` loads in every chaos subprocess.

It builds the app from the environment the orchestrator sets, and marks a worker or
beat ready by creating a file named after its incarnation, which the monkey checks
before picking it as a target (a process killed while still starting up tests little).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from celery import signals

from .app import make_app
from .config import ENV_ACKS_LATE, ENV_INCARNATION, ENV_WORKER_MOVER, SharedSettings

settings = SharedSettings.from_env()
incarnation = os.environ.get(ENV_INCARNATION, "unknown")
app = make_app(
    settings,
    acks_late=os.environ.get(ENV_ACKS_LATE) == "1",
    worker_mover=os.environ.get(ENV_WORKER_MOVER, "1") == "1",
    incarnation=incarnation,
)


def _mark_ready(**_: Any) -> None:
    (Path(settings.ready_dir) / incarnation).touch()


signals.worker_ready.connect(_mark_ready, weak=False)
signals.beat_init.connect(_mark_ready, weak=False)
