"""The demo's tasks: ordinary Celery tasks, nothing in them knows about celery-delayq.

Each one notes its start time and the ETA its message carried in the start log, so the
demo can show how late (never early) a delayed task ran. They are shared tasks, so both
the packaged demo's app and the repository's ``example_project`` run them.
"""

from __future__ import annotations

from datetime import datetime

from celery import Task, shared_task

from . import starts


def eta_of(task: Task) -> str | datetime | None:
    """The ETA the message carried: Celery's ``eta``, or on RabbitMQ, where a due task
    arrives as an ordinary one, the ``x-delayq-eta`` header celery-delayq kept it in."""
    return task.request.eta or task.request.get("x-delayq-eta")


@shared_task(bind=True)  # type: ignore[misc,untyped-decorator]  # celery has no hints
def stamp(self: Task, run: str, label: str) -> None:
    """Note when this run started; the task does nothing else."""
    starts.record(self.app.conf.demo_redis_url, run, label, eta_of(self))


@shared_task(bind=True, max_retries=1)  # type: ignore[misc,untyped-decorator]
def flaky(self: Task, run: str, label: str) -> None:
    """Fail on the first attempt and retry once with ``countdown=1``.

    The retry is a new message with an ETA, so it too waits in Redis, not in the worker.
    """
    attempt = self.request.retries + 1
    starts.record(self.app.conf.demo_redis_url, run, f"{label}, attempt {attempt}", eta_of(self))
    if attempt == 1:
        raise self.retry(countdown=1)
