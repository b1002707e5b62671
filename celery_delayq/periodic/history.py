"""What became of a periodic entry's occurrences: its last run, and how many ran late or
not at all.

- A worker records each run of an entry's task as it starts (worker/periodic_runs.py):
  ``P:periodic:runs`` maps the entry's name to the occurrence and the start time of its
  last run, so an operator sees that it ran, not only that it was sent; and counts it, in
  ``P:periodic:counts`` (``runs:<entry>``, django-celery-beat's ``total_run_count``).
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
from .entry import from_ms, to_ms

__all__ = ["EntryHistory", "History"]


@dataclass(frozen=True)
class History:
    """An entry's last run (None: none recorded) and its missed occurrences so far."""

    last_occurrence: datetime | None = None  # the occurrence the last run stood for
    last_started: datetime | None = None  # when a worker started it
    late: int = 0  # missed occurrences run late (catch_up "latest" or "all")
    missed: int = 0  # missed occurrences not run (catch_up "none", or past the bound)
    total_run_count: int = 0  # runs workers started


class EntryHistory:
    """The runs and missed occurrences of the periodic entries of one store."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys

    def ran(self, name: str, occurrence: datetime, started: datetime) -> None:
        """Record that a worker started the run of ``name`` for ``occurrence``, and count it."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(self.keys.periodic_runs, name, f"{to_ms(occurrence)} {to_ms(started)}")
            pipe.hincrby(self.keys.periodic_counts, f"runs:{name}", 1)
            pipe.execute()

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
            runs, late, missed, counted = pipe.execute()
        return {
            name: History(*_run(runs[i]), _count(late[i]), _count(missed[i]), _count(counted[i]))
            for i, name in enumerate(names)
        }

    def forget(self, name: str) -> None:
        """Drop the history of a removed entry."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hdel(self.keys.periodic_runs, name)
            fields = (f"{kind}:{name}" for kind in ("late", "missed", "runs"))
            pipe.hdel(self.keys.periodic_counts, *fields)
            pipe.execute()


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
