"""The periodic entry's ledger check: each occurrence sent once and run.

Beats write the entry's occurrences ahead, under kills of beats, workers and movers and
Redis restarts. From the ``O`` entries (each run of an occurrence, chaos/app.py), between
the first occurrence run and the last:

- **missed**: an occurrence of the 1-second grid that never ran;
- **sent twice**: an occurrence that ran under two task ids: two messages for it, the
  scheduler's fault (a second run of the same task id is a redelivery by the broker, a
  worker killed or held past the visibility timeout: Celery's at-least-once, counted
  apart);
- **lateness**: from an occurrence to its first run (Redis restarts and pauses make some
  late; late is not missed).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .book import Book
from .config import PERIODIC_ENTRY, PERIODIC_EVERY


@dataclass
class PeriodicOutcome:
    occurrences: int = 0  # on the grid from the first run to the last
    ran: int = 0  # of those, that ran
    missed: list[str] = field(default_factory=list)
    sent_twice: list[str] = field(default_factory=list)
    redelivered: int = 0  # extra runs of one task id
    latest_first_run: float = 0.0  # seconds from an occurrence to its first run, at most


def check_periodic(book: Book) -> PeriodicOutcome:
    ids: defaultdict[datetime, set[str]] = defaultdict(set)
    runs: defaultdict[datetime, list[float]] = defaultdict(list)
    for tick in book.ticks:
        if tick.get("entry") != PERIODIC_ENTRY or not isinstance(tick.get("occ"), str):
            continue
        occurrence = datetime.fromisoformat(tick["occ"])
        ids[occurrence].add(tick["id"])
        runs[occurrence].append(tick["t"])
    outcome = PeriodicOutcome()
    if not ids:
        return outcome
    first, last = min(ids), max(ids)
    step = timedelta(seconds=PERIODIC_EVERY)
    grid = [first + step * n for n in range(round((last - first) / step) + 1)]
    outcome.occurrences = len(grid)
    outcome.ran = sum(1 for when in grid if when in ids)
    outcome.missed = [when.isoformat() for when in grid if when not in ids]
    outcome.sent_twice = [when.isoformat() for when, sent in sorted(ids.items()) if len(sent) > 1]
    outcome.redelivered = sum(len(runs[when]) - len(ids[when]) for when in ids)
    outcome.latest_first_run = max(min(runs[when]) - when.timestamp() for when in ids)
    return outcome
