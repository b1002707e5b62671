"""What became of a periodic entry's occurrences: its last run, and how many ran late or
not at all.

- A worker records each run of an entry's task as it starts (worker/periodic_runs.py), in
  one call of core/lua/run_start.lua on ``P:periodic:counts``: the occurrence and the
  start time of its last run (``last:<entry>``), so an operator sees that it ran, not only
  that it was sent; and counts it (``runs:<entry>``, django-celery-beat's
  ``total_run_count``) once per occurrence (a retry of the last run is not counted again).
  Versions before it kept the last run in ``P:periodic:runs``: read when ``last:`` is not
  written yet. An entry whose ``overlap`` is ``skip`` holds a running mark for the run's
  lease (``running:<entry>``, dropped as the run ends: run_end.lua); a run that would
  start while another occurrence's holds it is skipped, and counted (``skipped:<entry>``).
- The beat that writes an entry ahead after every beat was down for longer than the
  horizon counts the occurrences it finds missed (periodic/writer.py): those its
  ``catch_up`` runs late and those it skips, in ``P:periodic:counts``. ``status``, the
  metrics and the dashboard show them.

Counting is not part of the write-ahead call: a beat killed between the two leaves a count
one short, never an occurrence run twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

import redis

from ..core.layout.keys import KeySpace
from ..core.lua import StoreScripts
from .entry import from_ms, to_ms

__all__ = ["EntryHistory", "History", "RunStart"]


@dataclass(frozen=True)
class History:
    """An entry's last run (None: none recorded) and its missed occurrences so far."""

    last_occurrence: datetime | None = None  # the occurrence the last run stood for
    last_started: datetime | None = None  # when a worker started it
    late: int = 0  # missed occurrences run late (catch_up "latest" or "all")
    missed: int = 0  # missed occurrences not run (catch_up "none", or past the bound)
    total_run_count: int = 0  # runs workers started, one per occurrence
    skipped: int = 0  # occurrences skipped: the entry's previous run was still going


@dataclass(frozen=True)
class RunStart:
    """What ``ran`` decided: whether the run starts (False: skipped, an overlap), and the
    entry's runs and skips counted so far."""

    started: bool
    runs: int
    skipped: int


class EntryHistory:
    """The runs and missed occurrences of the periodic entries of one store."""

    def __init__(
        self, client: redis.Redis, keys: KeySpace, scripts: StoreScripts | None = None
    ) -> None:
        self.client = client
        self.keys = keys
        #: a store's own (made once for its life), else made here
        self.scripts = scripts or StoreScripts(client)

    def ran(
        self, name: str, occurrence: datetime, started: datetime, lease_ms: int = 0
    ) -> RunStart:
        """A worker starts the run of ``name`` for ``occurrence``: record it as the last
        run and count it (unless it is the last occurrence counted again), in one call.
        ``lease_ms`` (overlap ``skip``): skip it instead while another occurrence's run
        holds the running mark, else hold the mark for that long."""
        reply = self.scripts.run_start(
            keys=[self.keys.periodic_counts],
            args=[name, to_ms(occurrence), to_ms(started), max(0, int(lease_ms))],
        )
        return RunStart(reply[0] == 1, int(reply[1]), int(reply[2]))

    def ended(self, name: str, occurrence: datetime) -> bool:
        """The run of ``name`` for ``occurrence`` ended: drop its running mark (if it is
        still its own), so the next occurrence starts."""
        end = self.scripts.run_end
        return bool(end(keys=[self.keys.periodic_counts], args=[name, to_ms(occurrence)]))

    def count(self, name: str, late: int, missed: int) -> None:
        """Add to the entry's counts of occurrences run late and not run."""
        with self.client.pipeline(transaction=False) as pipe:
            if late:
                pipe.hincrby(self.keys.periodic_counts, f"late:{name}", late)
            if missed:
                pipe.hincrby(self.keys.periodic_counts, f"missed:{name}", missed)
            pipe.execute()

    def read(self, names: Iterable[str]) -> dict[str, History]:
        """The history of each of ``names`` (an empty one when nothing is recorded)."""
        names = list(names)
        if not names:
            return {}
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hmget(self.keys.periodic_runs, names)
            pipe.hmget(self.keys.periodic_counts, [f"late:{n}" for n in names])
            pipe.hmget(self.keys.periodic_counts, [f"missed:{n}" for n in names])
            pipe.hmget(self.keys.periodic_counts, [f"runs:{n}" for n in names])
            pipe.hmget(self.keys.periodic_counts, [f"skipped:{n}" for n in names])
            pipe.hmget(self.keys.periodic_counts, [f"last:{n}" for n in names])
            older, late, missed, counted, skipped, last = pipe.execute()
        return {
            name: History(
                *_run(last[i] or older[i]),  # older: as versions before run_start.lua kept it
                _count(late[i]),
                _count(missed[i]),
                _count(counted[i]),
                _count(skipped[i]),
            )
            for i, name in enumerate(names)
        }

    def forget(self, name: str) -> None:
        """Drop the history of a removed entry."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hdel(self.keys.periodic_runs, name)
            fields = (f"{kind}:{name}" for kind in COUNTED)
            pipe.hdel(self.keys.periodic_counts, *fields)
            pipe.execute()


#: The fields of ``P:periodic:counts`` an entry has, by kind (``<kind>:<entry>``).
COUNTED = ("late", "missed", "runs", "counted", "skipped", "skip-counted", "last", "running")


def _run(raw: bytes | None) -> tuple[datetime | None, datetime | None]:
    """A recorded run, as read back; crafted bytes (digits past the year 9999, say) read
    as no run."""
    parts = raw.split() if raw else []
    if len(parts) != 2 or not all(p.isdigit() and len(p) <= 15 for p in parts):
        return None, None
    try:
        return from_ms(int(parts[0])), from_ms(int(parts[1]))
    except (ValueError, OverflowError, OSError):
        return None, None


def _count(raw: bytes | None) -> int:
    text = raw.decode("ascii", "replace") if raw else "0"
    return int(text) if text.isdigit() and len(text) <= 18 else 0
