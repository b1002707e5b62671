"""Demo: countdown and ETA tasks wait in Redis, then start on time in a real worker.

Run it from the repository root::

    python -m example_project.demo                      # starts a throw-away Redis
    REDIS_URL=redis://localhost:6379/0 python -m example_project.demo
    python -m example_project.demo --pool solo          # a worker without child processes
    BROKER_URL=amqp://guest:guest@localhost:5672// python -m example_project.demo
                                                        # RabbitMQ, delayed tasks in Redis

The story is the packaged demo's (``celery_delayq.demo.runner``, which
``python -m celery_delayq.demo`` runs from an installed package); here its worker runs
this project's app, ``example_project.proj``, configured in ``proj/celeryconfig.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from celery_delayq.demo.runner import main
from celery_delayq.demo.servers import Project

PROJECT = Project(
    "example_project.proj",
    root=Path(__file__).resolve().parent.parent,
    prog="python -m example_project.demo",
)

if __name__ == "__main__":
    sys.exit(main(project=PROJECT))
