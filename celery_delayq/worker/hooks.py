"""What celery-delayq does to a worker that uses one of its transports.

A worker loads its broker transport's module when it first looks at the transport,
just before it sends ``worker_init`` and builds its blueprint: the one moment a
settings-only plugin can add bootsteps to the worker (its mover, DueTimers,
GlobalRateLimits, and the consumer's PoisonGuard), wrap its tasks' ``run`` for periodic
runs before the pool builds its tracers (periodic_runs.py), hold concurrency-limited
tasks' running slots (flow/running_slots.py), and choose how its remote-control node answers
``inspect scheduled``. Under ``delayq_global_rate_limits`` a step switches off the
worker's own rate limits (flow/global_rates.py). The transports' settings path
(celery_delayq/transport.py) connects a handler that imports this one on call; the broker
modules have no import-time effects. ``dispatch_uid`` keeps it to one connection.
"""

from __future__ import annotations

from typing import Any

from celery import signals


def on_worker_init(sender: Any, **_: Any) -> None:
    # Imported here, in a starting worker: a process that only publishes never loads them.
    from ..brokers.common.diverter import check_store_setting, uses_delayq
    from ..brokers.common.limit_keys import watch_limit_keys
    from ..core.store import import_facets
    from .bootstep import WorkerMover
    from .due_timers import DueTimers
    from .flow.global_rates import GlobalRateLimits
    from .flow.running_slots import RENEWER, child_stopped, end_slot, revoked
    from .inspect import list_delayed_in_scheduled
    from .periodic_runs import end_periodic_run, guard_tasks
    from .poison import PoisonGuard

    check_store_setting(sender.app)
    if uses_delayq(sender.app):
        import_facets()
        sender.app.steps["worker"].update({WorkerMover, DueTimers, GlobalRateLimits})
        sender.app.steps["consumer"].add(PoisonGuard)
        watch_limit_keys()  # the worker's retries and canvases take their keys too
        # before the pool builds its tracers
        guard_tasks(sender.app, getattr(sender, "time_limit", None))
        signals.task_postrun.connect(
            end_periodic_run, weak=False, dispatch_uid="celery_delayq.periodic_runs"
        )
        # running slots of concurrency-limited tasks (flow/running_slots.py): taken (by guard_tasks'
        # wrapper) and given back in the process that runs the task, renewed, revoked
        # and given back for a pool process lost or killed mid-task in the main process
        for signal, receiver in (
            (signals.task_postrun, end_slot),
            (signals.task_received, RENEWER.received),
            (signals.task_revoked, revoked),
            (signals.task_failure, child_stopped),
        ):
            signal.connect(receiver, weak=False, dispatch_uid=f"celery_delayq.slots.{signal.name}")
    list_delayed_in_scheduled(sender.app)
