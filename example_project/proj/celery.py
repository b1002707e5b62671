"""The Celery app; configured from ``celeryconfig`` so settings stay out of code.

Its tasks are the demo's (``celery_delayq.demo.demo_tasks``: ordinary shared tasks, which the
packaged demo, ``python -m celery_delayq.demo``, runs too).
"""

from __future__ import annotations

from celery import Celery

app = Celery("example_project.proj", include=["celery_delayq.demo.demo_tasks"])
app.config_from_object("example_project.proj.celeryconfig")
