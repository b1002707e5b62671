"""A concurrency-limited task's running slot, from its worker's side: held while the
worker holds the task, given back as the task ends.

The release takes the slot (core/lua/gates.lua: the message's key in its bucket's
``P:{Q}:fc:r:<bucket>``, with a lease of ``delayq_concurrency_lease``); the message names
it in its ``delayq_slot`` header (config/limits.py ``mark_slot``). Here, in every pool:

- as the task starts (in the process that runs it, from the wrapper of its ``run``
  that periodic_runs.py puts in place), the slot is taken again
  (core/lua/slot_take.lua): kept when still held, else a free one taken. A message
  the broker delivers again after its worker died (an ``acks_late`` task's) did not
  pass the gate again: it runs in the dead worker's slot while that slot's lease
  lasts (the same message: the dead run is over), else in a free slot; with none
  free, it is published again, the same task, to wait in its bucket, and this
  delivery ends without running it (``Ignore``: acknowledged, no result);
- as it ends (``task_postrun``: returned, failed, retried, ignored, rejected; or
  ``task_revoked`` in the worker's main process, for a task revoked before it ran or
  terminated), the slot is given back and its bucket made ready at once
  (core/lua/slot_end.lua), so the movers release the next message without waiting for
  the lease to end;
- when the pool process running it dies while the worker lives on (SIGKILL of that
  process alone, the OOM killer, ``os._exit``: no ``task_postrun``), the worker's main
  process gives the slot back as Celery reports the task failed with ``WorkerLostError``
  (``task_failure``, sent once the message is acknowledged or rejected for good). When
  Celery requeues it instead (``task_reject_on_worker_lost``) it sends no signal, and the
  slot is left to the message delivered again, which keeps it as it starts (above):
  given back then, it could be taken from the new run;
- at its hard time limit (prefork: the solo and threads pools enforce none) Celery
  reports the task failed with ``TimeLimitExceeded`` (``task_failure`` in the main
  process), then the pool kills the process running it (``SIGTERM``, whose ``SystemExit``
  may still run ``task_postrun`` there, then ``SIGKILL`` after 0.1 s): the main process
  gives the slot back at its event loop's next turn, after that kill. When Celery
  requeues the message (``acks_late`` without ``acks_on_failure_or_timeout``), 5.5 sends
  no signal, 5.7 does: the message delivered again keeps its slot, or takes a free one,
  or waits in its bucket. A soft time limit raises in the task, which ends as any
  failing task does;
- while the worker holds the message, reserved (prefetched, or waiting for its ETA) or
  running, a thread of the worker's main process renews its lease every third of it
  (``Renewer``), only while the slot is held: a slot ended or run out stays so. A worker
  that dies stops renewing, and its slots are free again when their leases end.

So no more tasks of a bucket start than it has slots, and each holds its slot until
it ends, or its worker dies, or its worker stops renewing it for a whole lease (cut
off from Redis, or stopped): a task still running then no longer counts, and another
may start in its place. A slot is the message's: one message running twice at once
(the broker delivered it again while its first worker still ran it, after
``visibility_timeout``) runs twice in one slot. With Redis out of reach, or a crafted
header, the task runs and a warning is logged; the header can name only flow-control
keys of this store. A task lost with no ``task_failure`` (its backend could not store
the failure, or the task had stored its success) has its slot back as its lease ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from celery import Celery
from celery.exceptions import TimeLimitExceeded, WorkerLostError
from celery.worker import state as worker_state
from kombu.asynchronous import get_event_loop

from ...config.limits import LIMIT_KEY_HEADER, SLOT_HEADER
from ...config.settings import config_of
from ...core.layout.gates import MOST_KEY_BYTES, bucket_shard_key
from ...core.layout.keys import KeySpace
from ...core.layout.record import task_key
from ...core.lua import run_pipelined
from ..stores import STORES

logger = logging.getLogger(__name__)

#: Longest queue name and bucket (characters) a slot header may name: a bucket is a task
#: name and a limit key (of at most MOST_KEY_BYTES).
MOST_NAME_LENGTH = 1024 + MOST_KEY_BYTES
#: How long a request may be held unseen by the worker's state (seconds): Celery notes a
#: received request as reserved or scheduled just after ``task_received``.
UNSEEN_GRACE = 5.0
#: How long the slot of a request Celery is done with is remembered (seconds): Celery
#: sends ``task_failure`` for a lost pool process after its backend stored the failure.
ENDED_GRACE = 30.0


class Slot(NamedTuple):
    """One message's running slot."""

    keys: list[str]  # KEYS of slot_end.lua: running, state, waiting, ready
    member: bytes  # the message's key (its task id, packed)
    bucket: str
    take_keys: list[str]  # KEYS of slot_take.lua: running, state, the bucket index


def slot_of(keys: KeySpace, value: Any, task_id: Any) -> Slot | None:
    """The slot a ``delayq_slot`` header names, for the task ``task_id``; None for
    none, or for a header this code did not write."""
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not isinstance(task_id, str):
        return None
    queue, bucket = value
    if not isinstance(queue, str) or not isinstance(bucket, str) or not queue or not bucket:
        return None
    if max(len(queue), len(bucket), len(task_id)) > MOST_NAME_LENGTH or not task_id:
        return None
    try:
        shard_key, member = bucket_shard_key(bucket), task_key(task_id)
    except UnicodeError:
        return None
    shard = keys.shard_of(queue, shard_key)
    return Slot(shard.slot_keys(bucket), member, bucket, shard.slot_take_keys(bucket))


def _store_failed(app: Celery, what: str, exc: Exception) -> None:
    STORES.drop(app)
    logger.warning("celery-delayq: a running slot could not be %s: %r", what, exc)


#: The slots this process took as their tasks started, by task id, until they end.
_TAKEN: dict[str, Slot] = {}


def slot_taken(task: Any) -> bool:
    """Hold the slot of the task starting in this process, if it has one (see above);
    False when none was free and the message went back to wait in its bucket: then the
    task must not run (periodic_runs.py's wrapper of ``run`` calls it)."""
    request: Any = getattr(task, "request", None)
    task_id = getattr(request, "id", None)
    if request is None or request.get(SLOT_HEADER) is None or not isinstance(task_id, str):
        return True
    app = task.app
    try:
        store = STORES.of(app)
        slot = slot_of(store.keys, request.get(SLOT_HEADER), task_id)
        if slot is None:
            logger.warning("celery-delayq: task %r names no slot it can hold", task_id)
            return True
        _TAKEN[task_id] = slot  # given back as it ends, whatever the take's fate
        outcome, _lease = store.scripts.slot_take(
            keys=slot.take_keys, args=[slot.member, "take", slot.bucket]
        )
    except Exception as exc:  # the task runs
        _store_failed(app, "taken", exc)
        return True
    if outcome != 3:
        return True
    del _TAKEN[task_id]
    try:
        send_back(task, request)
    except Exception as exc:  # the task runs, above its limit, rather than be lost
        logger.warning("celery-delayq: task %s could not wait for a slot: %r", task_id, exc)
        return True
    logger.info(
        "celery-delayq: task %s waits in its bucket again: its slot's lease ran out and "
        "none is free (delivered again after its worker died?)",
        task_id,
    )
    return False


def send_back(task: Any, request: Any) -> None:
    """Publish the task's message again, the same task: a concurrency-limited task's
    message waits in its bucket (config/limits.py), and is released into a free slot."""
    headers = dict(request.headers) if isinstance(request.headers, Mapping) else {}
    key = request.get(LIMIT_KEY_HEADER)
    if key is not None:
        headers[LIMIT_KEY_HEADER] = key
    task.signature_from_request(request, headers=headers).apply_async()


def give_back(app: Celery, slot: Slot) -> None:
    """End ``slot`` and let its bucket release at once."""
    try:
        store = STORES.of(app)
        store.scripts.slot_end(
            keys=slot.keys, args=[slot.member, slot.bucket, store.keys.wakeup_channel]
        )
    except Exception as exc:  # its lease ends it
        _store_failed(app, "given back", exc)


def end_slot(sender: Any = None, task_id: Any = None, task: Any = None, **_: Any) -> None:
    """``task_postrun``: the task ended (whatever its state: a retry is a new message,
    which takes a slot of its own when released)."""
    slot = _TAKEN.pop(task_id, None) if isinstance(task_id, str) else None
    if slot is not None and task is not None:
        give_back(task.app, slot)


def request_slot(request: Any) -> tuple[Celery, Slot] | None:
    """The app and slot of a request in the worker's main process (``celery.worker.
    request.Request``), if it names one."""
    headers = getattr(request, "request_dict", None)
    if not isinstance(headers, Mapping) or headers.get(SLOT_HEADER) is None:
        return None
    app = request.task.app
    try:
        keys = STORES.of(app).keys
    except Exception as exc:
        _store_failed(app, "found", exc)
        return None
    slot = slot_of(keys, headers.get(SLOT_HEADER), request.id)
    return None if slot is None else (app, slot)


def revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    """``task_revoked`` (main process): a revoked task never runs, or was terminated
    mid-run (its ``task_postrun`` never comes)."""
    found = request_slot(request)
    if found is not None:
        RENEWER.forget(request.id)
        give_back(*found)


def child_stopped(sender: Any = None, task_id: Any = None, exception: Any = None, **_: Any) -> None:
    """``task_failure`` in the worker's main process with ``WorkerLostError`` (the pool
    process running the task died under it: SIGKILL, the OOM killer, ``os._exit``) or
    ``TimeLimitExceeded`` (its hard time limit: the pool kills that process next), so its
    ``task_postrun`` may never come. Celery sends ``WorkerLostError``'s once the message
    is acknowledged or rejected for good, never when it requeues it
    (``task_reject_on_worker_lost``): a message delivered again keeps its slot
    (slot_take.lua), and giving it back then could end the slot of the new run."""
    if not isinstance(exception, (WorkerLostError, TimeLimitExceeded)):
        return
    if not isinstance(task_id, str) or task_id in _TAKEN:  # running here: task_postrun ends it
        return
    found = RENEWER.ended(task_id)
    if found is not None:
        at_next_turn(give_back, *found)


def at_next_turn(callback: Callable[..., None], *args: Any) -> None:
    """Call ``callback`` at the next turn of the worker's event loop, at once without
    one: Celery reports a task past its hard time limit failed just before the pool kills
    its process, from the loop, and the next task must not start before that kill."""
    hub = get_event_loop()
    if hub is None:
        callback(*args)
    else:
        hub.call_soon(callback, *args)


class Held(NamedTuple):
    app: Celery
    slot: Slot
    request: Any
    since: float  # monotonic


class Ended(NamedTuple):
    app: Celery
    slot: Slot
    at: float  # monotonic: when the renewer found Celery done with the request


class Renewer:
    """Renews the leases of the slots of the requests the worker holds, from a thread of
    its main process that runs while there are any; remembers the slots of the requests
    Celery is done with for ``ENDED_GRACE``, for ``child_stopped``: Celery drops a request
    from its state before it sends ``task_failure``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[str, Held] = {}
        self._ended: dict[str, Ended] = {}
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()  # a first request held: renewals to pace again

    def received(self, sender: Any = None, request: Any = None, **_: Any) -> None:
        """``task_received``: hold the request's slot until Celery is done with it."""
        found = request_slot(request)
        if found is None:
            return
        with self._lock:
            self._held[request.id] = Held(*found, request, time.monotonic())
            if len(self._held) == 1:
                self._wake.set()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="celery-delayq slot renewer", daemon=True
                )
                self._thread.start()

    def forget(self, task_id: str) -> None:
        with self._lock:
            self._held.pop(task_id, None)
            self._ended.pop(task_id, None)

    def ended(self, task_id: str) -> tuple[Celery, Slot] | None:
        """The app and slot of the request ``task_id`` that Celery is done with, forgotten
        here; None when none is known, or when Celery holds one of that id again."""
        with self._lock:
            held = self._held.get(task_id)
            if held is not None and _celery_holds(held.request):
                return None
            self._held.pop(task_id, None)
            ended = self._ended.pop(task_id, None)
            if held is not None:
                return held.app, held.slot
            return None if ended is None else (ended.app, ended.slot)

    def _holding(self) -> list[Held] | None:
        """The requests still held (reserved, scheduled or running); moves the rest to
        the ended, and forgets those ended long ago. None when nothing is left."""
        now = time.monotonic()
        with self._lock:
            for task_id, held in list(self._held.items()):
                if not _still_held(held, now):
                    del self._held[task_id]
                    self._ended[task_id] = Ended(held.app, held.slot, now)
            for task_id, ended in list(self._ended.items()):
                if now - ended.at >= ENDED_GRACE:
                    del self._ended[task_id]
            if not self._held and not self._ended:
                self._thread = None
                return None
            return list(self._held.values())

    def _run(self) -> None:
        while True:
            try:
                holding = self._holding()
                if holding is None:
                    return
                pause = self.renew(holding) if holding else ENDED_GRACE
            except Exception:  # a bug here must not end the renewals
                logger.exception("celery-delayq: renewing running slots failed")
                pause = 1.0
            self._wake.wait(pause)
            self._wake.clear()

    def renew(self, holding: list[Held]) -> float:
        """Renew these slots' leases; seconds until the next renewal."""
        leases_ms = []
        by_app: dict[Celery, list[Slot]] = {}
        for held in holding:
            by_app.setdefault(held.app, []).append(held.slot)
        for app, slots in by_app.items():
            leases_ms.append(config_of(app).concurrency_lease * 1000)
            try:
                store = STORES.of(app)
                take = store.scripts.slot_take
                calls = [
                    (take, slot.take_keys, [slot.member, "renew", slot.bucket]) for slot in slots
                ]
                replies = run_pipelined(store.client, calls)
            except Exception as exc:  # tried again at the next renewal
                _store_failed(app, "renewed", exc)
                continue
            leases_ms.extend(int(lease) for _, lease in replies if int(lease) > 0)
        return max(0.1, min(leases_ms) / 3000)


def _celery_holds(request: Any) -> bool:
    # Celery 5.5 has no set of the requests waiting for their ETA (its timer holds them)
    scheduled = getattr(worker_state, "scheduled_requests", ())
    return worker_state.requests.get(request.id) is request or request in scheduled


def _still_held(held: Held, now: float) -> bool:
    return _celery_holds(held.request) or now - held.since < UNSEEN_GRACE


RENEWER = Renewer()
