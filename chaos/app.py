"""The run's Celery app and its tasks: ``chaos.work``, which notes every execution, and
``chaos.tick``, the periodic entry's, which notes each run of an occurrence.

A task's plan is a list of retry countdowns: it retries (``self.retry(countdown=...)``,
same task id) until ``request.retries`` reaches the plan's length, with countdowns cut
short so no ETA falls after ``last_eta``. Each execution writes a begin entry before
doing anything and an end entry once done (or once its retry was published), so an
execution cut short by SIGKILL shows as begun, not ended.

Publishes retried by kombu after a connection error are noted too, through the
``errback`` of Celery's publish retry policy: a retried publish whose first attempt
reached Redis is the one way a single publish can store two messages.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from itertools import count
from typing import Any

from celery import Celery
from celery.exceptions import Retry

from celery_delayq.testing import build_app, eta_seconds

from .config import PERIODIC_TASK, SharedSettings, capped_countdown
from .ledger import process_ledger

TASK_NAME = "chaos.work"

#: The message being published in this thread: (task id, its retries value).
publishing: ContextVar[tuple[str, int] | None] = ContextVar("publishing", default=None)

_execution_ids = count()


def publish_retry_policy() -> dict[str, Any]:
    """Retry a publish for about 20 s (longer than any Redis restart of the monkey's)."""
    return {
        "max_retries": 40,
        "interval_start": 0.1,
        "interval_step": 0.2,
        "interval_max": 0.5,
        "errback": _note_publish_error,
    }


def _note_publish_error(exc: BaseException, interval: float) -> None:
    target = publishing.get()
    if target is not None:
        process_ledger().write("P", id=target[0], r=target[1], e=_short(exc))


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def make_app(
    settings: SharedSettings, *, acks_late: bool, incarnation: str, worker_mover: bool = True
) -> Celery:
    """The app of every chaos process; workers differ in ``acks_late`` and whether they
    run a mover."""
    app = build_app(
        "chaos",
        {
            **settings.celery_settings(acks_late, worker_mover),
            "task_publish_retry_policy": publish_retry_policy(),
        },
        current=True,
    )

    def work(self: Any, plan: list[float], last_eta: float) -> None:
        request = self.request
        ledger = process_ledger()
        execution = f"{incarnation}/{os.getpid()}/{next(_execution_ids)}"
        ledger.write(
            "B",
            x=execution,
            id=request.id,
            r=request.retries,
            tag=(request.properties or {}).get("delivery_tag"),
            inc=incarnation,
            al=acks_late,
            rd=bool((request.delivery_info or {}).get("redelivered")),
            eta=eta_seconds(request.eta),
        )
        if request.retries >= len(plan):
            ledger.write("E", x=execution, o="done")
            return
        token = publishing.set((request.id, request.retries + 1))
        try:
            raise self.retry(countdown=capped_countdown(plan[request.retries], last_eta))
        except Retry:
            ledger.write("E", x=execution, o="retry")
            raise
        except Exception as exc:
            ledger.write("E", x=execution, o="retry-failed", e=_short(exc))
            raise
        finally:
            publishing.reset(token)

    def tick(self: Any) -> None:
        """A run of the periodic entry: which occurrence, which message, where."""
        request = self.request
        process_ledger().write(
            "O",
            id=request.id,
            entry=request.get("delayq-periodic"),
            occ=request.get("delayq-occurrence"),
            inc=incarnation,
            rd=bool((request.delivery_info or {}).get("redelivered")),
        )

    app.task(name=TASK_NAME, bind=True, max_retries=None)(work)
    # acks_late whatever the worker's setting: an occurrence lost with a killed worker's
    # early ack would be Celery's loss, not the scheduler's, and hide the check
    app.task(name=PERIODIC_TASK, bind=True, acks_late=True)(tick)
    return app
