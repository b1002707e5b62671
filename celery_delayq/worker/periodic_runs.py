"""A worker starts each run of a periodic entry's task with one call to the store: it
records the run as the entry's last, counts it, and, for an entry whose ``overlap`` is
``skip``, skips it while the entry's previous run is still going
(core/lua/run_start.lua, through periodic/history.py).

Where the decision is made: in the process that runs the task, as the run starts, inside
Celery's tracer (``celery.app.trace``), by raising ``celery.exceptions.Ignore`` from the
task's ``run``, which ``guard_tasks`` wraps in the worker. Celery's own handling of
``Ignore`` then does the rest, in every pool: the task body does not run, no result is
stored, the message is acknowledged (not delivered again) and ``task_postrun`` is sent.
The other hooks cannot: ``task_prerun`` receivers cannot stop a task (Celery's signal
dispatch logs and swallows their exceptions); ``before_start`` is looked up on the task's
class (a task's own would bypass it); ``loader.on_task_init`` runs outside the tracer's
``try`` (an ``Ignore`` there is an internal error); and a consumer step wrapping the task
strategy or ``Request`` decides in the worker's main process as the message arrives, not
as its run starts (a prefetched message waits there for a pool slot).

"Still going" ends as ``task_postrun`` comes (success, failure; a retried run goes on
until its retry ends), and at the latest when the running mark's lease is over
(``lease_of``): a worker killed mid-run blocks its entry that long. With Redis out
of reach, or crafted headers, the task runs, unrecorded, and a warning is logged.
"""

from __future__ import annotations

import functools
import logging
import math
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any, NamedTuple

from celery import Celery, states
from celery.exceptions import Ignore

from ..periodic.entry import MAX_NAME_LENGTH
from ..periodic.history import EntryHistory
from ..periodic.records import ENTRY_HEADER, OCCURRENCE_HEADER, OVERLAP_HEADER
from .flow.running_slots import slot_taken
from .stores import STORES

logger = logging.getLogger(__name__)

#: The running mark's lease when the task has no hard time limit (seconds): a run of an
#: entry whose overlap is skip counts as going that long at most. With a hard time limit
#: (the task's ``time_limit``, ``task_time_limit``), the lease is that limit: a pool that
#: enforces it (prefork) ends the run by then.
DEFAULT_LEASE = 3600.0
#: The longest lease taken from a time limit (a week): the limit is the message's too.
MAX_LEASE = 7 * 24 * 3600.0


class Run(NamedTuple):
    """A periodic entry's run as its task's headers name it."""

    name: str
    occurrence: datetime
    skip: bool  # overlap "skip"


def run_of(request: Any) -> Run | None:
    """The periodic run a task's request stands for; None for any other task, and for
    headers this code did not write (crafted)."""
    name, occurrence = request.get(ENTRY_HEADER), request.get(OCCURRENCE_HEADER)
    if not isinstance(name, str) or not isinstance(occurrence, str) or len(name) > MAX_NAME_LENGTH:
        return None
    if len(occurrence) > 64:
        return None
    try:
        when = datetime.fromisoformat(occurrence)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return Run(name, when, request.get(OVERLAP_HEADER) == "skip")


#: The hard time limit of the worker each app runs in (``celery worker --time-limit`` or
#: ``task_time_limit``), as ``guard_tasks`` found it: the pool's default for each task.
_WORKER_LIMITS: weakref.WeakKeyDictionary[Celery, Any] = weakref.WeakKeyDictionary()


def lease_of(task: Any, request: Any) -> float:
    """How long a run's running mark holds: its hard time limit (the message's, else
    the task's, else the worker's, else the app's), else ``DEFAULT_LEASE``."""
    limits = request.get("timelimit") or (None, None)
    hard = limits[0] if isinstance(limits, (list, tuple)) and limits else None
    app = task.app
    for seconds in (hard, task.time_limit, _WORKER_LIMITS.get(app), app.conf.task_time_limit):
        if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
            return float(min(seconds, MAX_LEASE))
    return DEFAULT_LEASE


#: The mark of a task's ``run`` that ``guard_tasks`` wrapped (it wraps each once).
GUARDED = "delayq_guarded"
#: The runs this process holds a running mark for, by task id, until ``task_postrun``.
_MARKED: dict[str, Run] = {}


def history_of(app: Celery) -> EntryHistory:
    store = STORES.of(app)
    return EntryHistory(store.client, store.keys, store.scripts)


def starts(task: Any) -> bool:
    """Record the start of the periodic run ``task``'s request stands for, if any;
    False when it is skipped (its entry's overlap is skip, its previous run going)."""
    request: Any = getattr(task, "request", None)
    run = None if request is None else run_of(request)
    if run is None:
        return True
    lease_ms = round(lease_of(task, request) * 1000) if run.skip else 0
    try:
        start = history_of(task.app).ran(
            run.name, run.occurrence, datetime.now(timezone.utc), lease_ms
        )
    except Exception as exc:  # the task runs, recorded or not
        STORES.drop(task.app)
        logger.warning("periodic entry %r: its run could not be recorded: %r", run.name[:80], exc)
        return True
    if not start.started:
        logger.info(
            "periodic entry %r: the run of %s is skipped, the previous one still going "
            "(overlap skip; %d skipped so far)",
            run.name,
            run.occurrence.isoformat(),
            start.skipped,
        )
    elif run.skip and isinstance(getattr(request, "id", None), str):
        _MARKED[request.id] = run
    return start.started


def guarded(task: Any, run: Callable[..., Any]) -> Callable[..., Any]:
    """``run``, as the worker calls it: not at all for a skipped periodic run, nor for
    a concurrency-limited task that finds no running slot free (flow/running_slots.py)."""

    @functools.wraps(run)
    def guarded_run(*args: Any, **kwargs: Any) -> Any:
        if not starts(task):
            raise Ignore("periodic run skipped: the previous one is still going")
        if not slot_taken(task):
            raise Ignore("no running slot free: the message waits in its bucket again")
        return run(*args, **kwargs)

    setattr(guarded_run, GUARDED, True)  # noqa: B010 - a mark on a function, unchecked
    return guarded_run


def guard_tasks(app: Celery, time_limit: Any = None) -> None:
    """Wrap the ``run`` of each of ``app``'s tasks, before the pool builds its tracers
    (at ``worker_init``: a prefork pool forks later; other pools build them on first use).
    ``time_limit``: the worker's hard time limit, which its pool enforces on a task with
    none of its own (the command line's is not in the app's settings)."""
    _WORKER_LIMITS[app] = time_limit
    for task in app.tasks.values():
        if not getattr(task.run, GUARDED, False):
            task.run = guarded(task, task.run)


def end_periodic_run(
    sender: Any = None, task_id: Any = None, task: Any = None, state: Any = None, **_: Any
) -> None:
    """``task_postrun``: the run that holds its entry's running mark ended (it returned or
    failed): the entry's next occurrence may start. A run that is retried goes on: its
    retry, the same occurrence, takes the mark again, and ends it."""
    run = _MARKED.pop(task_id, None) if isinstance(task_id, str) else None
    if run is None or task is None or state == states.RETRY:
        return
    try:
        history_of(task.app).ended(run.name, run.occurrence)
    except Exception as exc:  # the mark's lease ends it
        STORES.drop(task.app)
        logger.warning("periodic entry %r: its run's end could not be recorded: %r", run.name, exc)
