"""The delayed store a worker process's task hooks write to (periodic runs'
starts, running slots: periodic_runs.py, flow/running_slots.py): one per app and process."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref

from celery import Celery

from ..brokers.connect import StoreConnection
from ..core.store import DelayedStore


class Stores:
    """One store per app and worker process, opened at its first use and kept,
    so a hook costs one round trip, not a connection (reopened after an error)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: app -> (the process that opened it, its connection, its store)
        self._open: weakref.WeakKeyDictionary[Celery, tuple[int, StoreConnection, DelayedStore]]
        self._open = weakref.WeakKeyDictionary()
        # a pool process forked while a thread of the main process (flow/running_slots.py's renewer)
        # held the lock would wait for it forever: each child starts with a free one
        os.register_at_fork(after_in_child=self._free_lock)

    def _free_lock(self) -> None:
        self._lock = threading.Lock()

    def of(self, app: Celery) -> DelayedStore:
        with self._lock:
            found = self._open.get(app)
            if found is None or found[0] != os.getpid():  # a forked pool process: its own
                connection = StoreConnection(app)
                found = self._open[app] = (os.getpid(), connection, connection.open())
            return found[2]

    def drop(self, app: Celery) -> None:
        """Forget ``app``'s store after an error: the next run opens it again."""
        with self._lock:
            found = self._open.pop(app, None)
        if found is not None and found[0] == os.getpid():
            with contextlib.suppress(Exception):  # dropped for an error already
                found[1].close()


STORES = Stores()
