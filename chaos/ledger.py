"""The run's ledger: each process appends JSON lines to a file of its own, outside Redis
(``celery_delayq.testing.ledger``: why nothing written there is lost to a kill).

Entry kinds (``k``), each with ``t`` (epoch seconds) and the fields listed:

- ``S`` scheduled: ``id``, ``eta``, ``n`` (retries planned); written only after
  ``apply_async`` returned.
- ``F`` publish failed: ``id``, ``e``; the message may or may not have been stored.
- ``P`` publish error retried by kombu: ``id``, ``r`` (retries of the message), ``e``.
- ``B`` execution began: ``x`` (execution id), ``id``, ``r``, ``tag`` (kombu delivery
  tag), ``inc`` (incarnation), ``al`` (acks_late), ``rd`` (redelivered), ``eta``.
- ``E`` execution ended: ``x``, ``o`` (``done``, ``retry``: the retry was published,
  ``retry-failed``: publishing it raised).
- ``R`` received by a worker (its consume returned it): ``tag``, ``id``, ``r``, ``inc``, ``ok``:
  whether kombu's ``unacked`` entry for it was written (``e`` on failure).
- ``A`` ack or reject sent to Redis: ``tag``, ``inc``, ``ok`` and ``e`` on failure.
- ``O`` a periodic occurrence began to run: ``id``, ``entry``, ``occ`` (the occurrence,
  ISO 8601), ``inc``, ``rd`` (redelivered).
- ``Z`` a fault injected on purpose (``--inject-faults``): ``fault``, ``id``, ``r``.
- ``X`` orchestrator event: ``ev`` and its own fields (spawn, kill, exit, chaos actions).
"""

from __future__ import annotations

import os
from functools import cache

from celery_delayq.testing import LedgerWriter

from .config import ENV_INCARNATION, SharedSettings


@cache
def process_ledger() -> LedgerWriter:
    """This subprocess's writer, named after its incarnation (from the environment)."""
    settings = SharedSettings.from_env()
    return LedgerWriter(settings.ledger_dir, os.environ.get(ENV_INCARNATION, "unknown"))
