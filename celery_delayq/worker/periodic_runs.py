"""A worker records each run of a periodic entry's task as it starts (its last run, for
``celery delayq periodic show``, the dashboard and the metrics).

The task's message names its entry and occurrence in headers (periodic/writer.py). The
record is one HSET, written before the task body runs; it never stops the task: with
Redis out of reach, or crafted headers, the task runs unrecorded and a warning is logged.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from ..brokers.connect import open_store
from ..periodic.entry import MAX_NAME_LENGTH
from ..periodic.history import EntryHistory
from ..periodic.records import ENTRY_HEADER, OCCURRENCE_HEADER

logger = logging.getLogger(__name__)


def record_periodic_run(sender: Any = None, task: Any = None, **_: Any) -> None:
    """``task_prerun``: record the run of a periodic entry's task."""
    request = getattr(task, "request", None)
    if request is None:
        return
    name, occurrence = request.get(ENTRY_HEADER), request.get(OCCURRENCE_HEADER)
    if not isinstance(name, str) or not isinstance(occurrence, str) or len(name) > MAX_NAME_LENGTH:
        return
    try:
        when = datetime.fromisoformat(occurrence)
        if when.tzinfo is None:
            raise ValueError("no time zone")
        with open_store(task.app, fail_fast=True) as store:
            EntryHistory(store.client, store.keys).ran(name, when, datetime.now(timezone.utc))
    except Exception as exc:  # the task runs, recorded or not
        logger.warning("periodic entry %r: its run could not be recorded: %r", name[:80], exc)
