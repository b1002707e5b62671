"""A periodic entry's occurrences written ahead into the store, once, by any number of
beats.

Each occurrence becomes an ordinary delayed message, due at its time, which the workers'
movers deliver even while every beat is down. A beat reads the entry's mark (its version
and the last occurrence written), builds the messages for the occurrences after it up to
``now + horizon`` (at least the next one), and stores them in one call that also moves
the mark (core/store/ahead.py): if another beat moved it first, nothing is written and this
beat starts over from the mark it found. So each occurrence is published once, whichever
beats run, crash or restart, with no leader.

An entry whose version differs from its mark's (an upsert, a resume) or that is paused
has the occurrences written ahead for its old version withdrawn in the same call; the new
version's are written from then on: from ``settle`` after now when some are pending (a
mover may have moved those due sooner ahead of their time: they stay), else from now;
the mark keeps where, for ``periodic.get`` (records.py). Versions only go forward: a
beat holding an entry older than its mark (read before a change, or a removal, which
leaves a tombstone) stops for it, as the store's call would refuse it; its next pass
reads the entry again.
Occurrences missed while no beat wrote ahead (every beat down for longer than the
horizon) follow the entry's ``catch_up``: the latest runs once (Celery's behaviour), each
runs (up to ``catch_up_bound``), or none does; a late one runs as soon as it is written.
Each message is built by periodic/sending.py.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import Celery

from ..config.errors import STORE_OUTAGES, ConfigurationError
from ..config.settings import config_of
from ..core.store import DelayedStore
from .entry import PeriodicEntry, error_text, from_ms, to_ms
from .history import EntryHistory
from .occurrences import Occurrences
from .records import Advance, Mark, change_start, runs_from
from .registry import Versioned
from .sending import occurrence_messages, store_of

logger = logging.getLogger(__name__)

#: The most occurrences one call writes ahead (an interval of a millisecond and a long
#: horizon would otherwise write without end); the next tick writes on from there.
MOST_AHEAD = 1_000
#: How far after now a late (caught-up) occurrence is due.
LATE_DELAY = timedelta(seconds=1)
#: How far ahead the message ``check`` builds is due (it is built, never stored).
DRY_RUN_AHEAD = timedelta(hours=1)
#: How many times a beat starts over from the mark another beat moved, in one call.
MOST_RETRIES = 5
#: How long after reading an entry a writer may still write it (seconds of its monotonic
#: clock); past that it stops and the next pass reads the entry again. Far below how
#: long a removal's tombstone is kept (core/store/ahead.py, ``GONE_KEPT_MS``), so no
#: writer writes a removed entry anew after its tombstone is forgotten.
MOST_READ_AGE = 3600.0


class OccurrenceWriter:
    """Writes periodic entries' occurrences ahead through ``app``'s celery-delayq channel."""

    def __init__(
        self,
        app: Celery,
        horizon: timedelta | None = None,
        catch_up_bound: int = 100,
        settle: timedelta | None = None,
    ) -> None:
        config = config_of(app)
        #: How far ahead occurrences are written (``delayq_periodic_horizon``): the longest
        #: every beat may be down without an occurrence going unwritten.
        self.horizon = timedelta(seconds=config.periodic_horizon) if horizon is None else horizon
        if self.horizon <= timedelta(0):
            raise ValueError("the horizon must be positive")
        self.app = app
        self.catch_up_bound = catch_up_bound
        #: Each entry's queue, by (name, version), as of the last ``advance_all``.
        self._queues: dict[tuple[str, int], str] = {}
        #: The entries, by (name, version), found to have no occurrence left (a crontab
        #: whose every time lies in a DST gap): found once, then skipped.
        self._ended: set[tuple[str, int]] = set()
        #: How many passes failed for each entry, by name (``advance_all``).
        self.failures: Counter[str] = Counter()
        if settle is None:
            settle = timedelta(seconds=config.move_ahead + config.burst_ahead + 1)
        #: A change leaves the occurrences due within this of now as they are, and the new
        #: version starts after it: a mover may have moved those ahead of their time
        #: (``delayq_move_ahead``, ``delayq_burst_ahead``), and rewriting one would run it
        #: twice.
        self.settle = settle

    def queue_of(self, entry: PeriodicEntry) -> str:
        """The queue the entry's task is routed to (Celery's own router)."""
        route = self.app.amqp.router.route(
            dict(entry.options), entry.task, entry.args, entry.kwargs
        )
        queue = route["queue"]
        kind = route.get("exchange_type") or getattr(queue.exchange, "type", None)
        if kind == "fanout":  # a broadcast is published at once, never kept until due
            raise ValueError("it is routed to a fanout exchange: its messages are not delayed")
        if not isinstance(queue.name, str) or not queue.name:
            raise ValueError(f"it is routed to no queue name: {queue.name!r}")
        return queue.name

    def check(self, entry: PeriodicEntry, now: datetime) -> None:
        """Refuse, with a ``ValueError``, an entry whose occurrences could not be written:
        its next occurrence is found and its message built as ``advance`` builds them
        (Celery's routing, ``send_task``, the serializer), and kept nowhere. An outage
        of Redis or of the broker raises as it is."""
        outages: tuple[type[BaseException], ...] = (ConfigurationError, *STORE_OUTAGES)
        try:
            occurrence = entry.occurrences().after(now)
            if occurrence is None:
                raise ValueError(f"it never fires in time zone {entry.timezone}, or has ended")
            queue = self.queue_of(entry)
            with self.app.producer_or_acquire() as producer:
                outages += tuple(producer.connection.connection_errors)
                due = datetime.now(timezone.utc) + DRY_RUN_AHEAD  # whatever ``now`` says
                captured = occurrence_messages(self.app, entry, [(occurrence, due)], producer)
            if len(captured) != 1:
                raise ValueError("its message would not wait in the store until due")
            if captured[0].queue != queue:  # as the store's write refuses it
                raise ValueError(f"its message is for queue {captured[0].queue!r}, not {queue!r}")
        except Exception as exc:
            if isinstance(exc, outages):
                raise
            raise ValueError(f"periodic entry {entry.name!r} refused: {error_text(exc)}") from exc

    def advance_all(
        self,
        entries: Sequence[Versioned],
        now: datetime,
        producer: Any = None,
        read_at: float | None = None,
    ) -> dict[str, Advance]:
        """``advance`` each of ``entries`` that needs it (a beat's pass): their marks are
        read in one pipeline, and those written far enough ahead (or of a newer version)
        are left at that, so a pass over thousands of entries costs one round trip and a
        loop.

        One entry stops no other: whatever it raises (a route or message that cannot be
        built, a record nested too deep), it is logged and counted in ``failures``, and
        the pass goes on. ``producer``: the pass's (its one store handle), else one of
        the app's pool for this call. ``read_at``: when ``entries`` were read
        (``time.monotonic()``; default: now)."""
        read_at = time.monotonic() if read_at is None else read_at
        with self.app.producer_or_acquire(producer) as producer:
            routed = self._route(entries)
            queues = self._queues
            marks = store_of(producer).ahead_marks(
                [(queues[e.entry.name, e.version], e.entry.name) for e in routed]
            )
            done: dict[str, Advance] = {}
            for each, read in zip(routed, marks):
                mark = Mark.parse(read)
                newer = mark is not None and mark.version > each.version  # stale: see _stale
                if newer or self._up_to_date(each.entry, each.version, mark, now):
                    continue
                try:
                    advanced = self.advance(each.entry, each.version, now, producer, read_at)
                    done[each.entry.name] = advanced
                except STORE_OUTAGES:
                    raise  # Redis is down: this pass ends, the next tries again
                except Exception as exc:
                    self._failed(each, exc)
                    continue
                if advanced.ended:
                    self._ended.add((each.entry.name, each.version))
            return done

    def _route(self, entries: Sequence[Versioned]) -> list[Versioned]:
        """The entries to advance (those not ended) whose queue is known, their queues
        kept in ``_queues``; an entry that cannot be routed is a failure, unless paused."""
        queues: dict[tuple[str, int], str] = {}
        routed: list[Versioned] = []
        for each in entries:
            key = (each.entry.name, each.version)
            if key in self._ended:
                continue
            try:
                queues[key] = self._queues.get(key) or self.queue_of(each.entry)
            except Exception as exc:
                if each.entry.enabled:
                    self._failed(each, exc)
                else:  # paused: none of it was written ahead, nothing is to be withdrawn
                    self._ended.add(key)
                continue
            routed.append(each)
        self._queues = queues  # the routes of the entries as they are now
        self._ended &= {(each.entry.name, each.version) for each in entries}
        return routed

    def _failed(self, each: Versioned, exc: Exception) -> None:
        """Log and count one entry's failure (with its traceback the first time)."""
        name = each.entry.name
        self.failures[name] += 1
        logger.error(
            "periodic entry %r (version %d): not written ahead (%d pass(es) so far): %s",
            name,
            each.version,
            self.failures[name],
            error_text(exc),
            exc_info=exc if self.failures[name] == 1 else None,
        )

    def _up_to_date(
        self, entry: PeriodicEntry, version: int, mark: Mark | None, now: datetime
    ) -> bool:
        """Whether ``mark`` already covers ``entry`` up to the horizon (or its pause)."""
        if mark is None or mark.version != version:
            return False
        if not entry.enabled:
            return mark.up_to_ms is None
        return mark.up_to_ms is not None and from_ms(mark.up_to_ms) >= now + self.horizon

    def advance(
        self,
        entry: PeriodicEntry,
        version: int,
        now: datetime,
        producer: Any = None,
        read_at: float | None = None,
    ) -> Advance:
        """Write ``entry``'s occurrences ahead up to ``now + horizon``, unless another beat
        did or a newer version is written; withdraw an old version's and a paused
        entry's. ``read_at``: when the entry was read (``time.monotonic()``; default: now)."""
        queue = self._queue_to_withdraw(entry) if not entry.enabled else self.queue_of(entry)
        return self._write(entry, version, queue, now, producer, read_at)

    def forget(self, entry: PeriodicEntry, version: int, now: datetime) -> Advance:
        """Withdraw ``entry``'s occurrences due after the settle window and leave a
        tombstone mark of ``version`` (the removal's, newer than any of the entry's), so a
        beat still holding the removed entry writes none of it again."""
        return self._write(entry, version, self._queue_to_withdraw(entry), now, removed=True)

    def _write(
        self,
        entry: PeriodicEntry,
        version: int,
        queue: str | None,
        now: datetime,
        producer: Any = None,
        read_at: float | None = None,
        removed: bool = False,
    ) -> Advance:
        """Plan against the mark found and write under it, starting over (up to
        ``MOST_RETRIES`` times) when another beat moved it first."""
        if queue is None:
            return Advance()
        read_at = time.monotonic() if read_at is None else read_at
        conflicts = 0
        with self.app.producer_or_acquire(producer) as producer:
            store = store_of(producer)
            for _ in range(MOST_RETRIES):
                read = store.ahead_mark(queue, entry.name)
                mark = Mark.parse(read)
                if _stale(entry, version, mark, read_at):
                    return Advance(conflicts=conflicts, stale=True)
                plan = self._plan(entry, version, mark, now, removed)
                if plan is None or plan.mark is None:
                    return Advance(conflicts=conflicts, ended=plan is not None)
                captured = occurrence_messages(self.app, entry, plan.runs, producer)
                withdraw_after = to_ms(now + self.settle) if plan.withdraw else None
                outcome = store.write_ahead(
                    queue, entry.name, read, plan.mark.text(), captured, withdraw_after
                )
                if outcome.written:
                    self._count_missed(store, entry, plan)
                    return Advance(
                        outcome.stored,
                        outcome.withdrawn,
                        plan.late,
                        plan.missed,
                        conflicts,
                        plan.ended,
                    )
                if outcome.stale:
                    return Advance(conflicts=conflicts, stale=True)
                conflicts += 1
        return Advance(conflicts=conflicts)

    def run_starts(
        self, store: DelayedStore, entries: Sequence[Versioned], now: datetime
    ) -> list[datetime]:
        """After when each of ``entries`` runs, from its mark (read in one pipeline):
        where its version started, or would start if written at ``now`` (records.py)."""
        queues = [self._queue_to_withdraw(each.entry, quiet=True) for each in entries]
        routed = [(queue, e.entry.name) for queue, e in zip(queues, entries) if queue]
        read = iter(store.ahead_marks(routed))
        return [
            runs_from(e.version, Mark.parse(next(read)) if queue else None, now, self.settle)
            for queue, e in zip(queues, entries)
        ]

    def _queue_to_withdraw(self, entry: PeriodicEntry, quiet: bool = False) -> str | None:
        """The entry's queue; None if it cannot be routed (then none of its occurrences
        was written ahead, and there is nothing to withdraw)."""
        try:
            return self.queue_of(entry)
        except Exception as exc:
            if not quiet:
                logger.warning("periodic entry %r: nothing to withdraw: %s", entry.name, exc)
            return None

    def _plan(
        self,
        entry: PeriodicEntry,
        version: int,
        mark: Mark | None,
        now: datetime,
        removed: bool = False,
    ) -> _Plan | None:
        """What to write against ``mark``, or None when it is up to date."""
        if removed or not entry.enabled:  # what is pending after the settle window goes
            if mark is not None and (mark.version, mark.up_to_ms, mark.removed) == (
                version,
                None,
                removed,
            ):
                return None  # paused (or removed) already
            since = to_ms(change_start(mark, now, self.settle))
            return _Plan(Mark(version, None, since, removed), withdraw=True)
        if self._up_to_date(entry, version, mark, now):
            return None
        if mark is not None and mark.version == version and mark.up_to_ms is not None:
            start, changed, since = from_ms(mark.up_to_ms), False, mark.since_ms
        else:  # new, changed or resumed: see change_start
            start, changed = change_start(mark, now, self.settle), True
            since = to_ms(start)
        end = now + self.horizon
        occurrences = entry.occurrences()
        late, missed, last_missed = self._missed(occurrences, start, now, entry.catch_up)
        upcoming = occurrences.upcoming(max(start, now), end, MOST_AHEAD)
        if not upcoming and not late and last_missed is None:  # the schedule has ended
            if not changed:
                return _Plan(None, ended=True)  # nothing more to write
            return _Plan(Mark(version, to_ms(now), since), withdraw=True, ended=True)
        last = upcoming[-1] if upcoming else last_missed
        assert last is not None
        runs = (*((each, now + LATE_DELAY) for each in late), *((each, each) for each in upcoming))
        return _Plan(Mark(version, to_ms(last), since), changed, runs, len(late), missed)

    def _count_missed(self, store: DelayedStore, entry: PeriodicEntry, plan: _Plan) -> None:
        """Count and log the occurrences no beat wrote in time (every beat was down)."""
        if not plan.late and not plan.missed:
            return
        EntryHistory(store.client, store.keys).count(entry.name, plan.late, plan.missed)
        logger.warning(
            "periodic entry %r: %d occurrence(s) missed while no beat wrote ahead; "
            "catch_up=%r runs %d late, skips %d",
            entry.name,
            plan.late + plan.missed,
            entry.catch_up,
            plan.late,
            plan.missed,
        )

    def _missed(
        self, occurrences: Occurrences, start: datetime, now: datetime, catch_up: str
    ) -> tuple[list[datetime], int, datetime | None]:
        """The missed occurrences in ``(start, now]`` to run late, how many are not run,
        and the last of them."""
        kept, count = occurrences.missed(start, now, self.catch_up_bound)
        late = [] if catch_up == "none" else kept[-1:] if catch_up == "latest" else kept
        return late, count - len(late), kept[-1] if kept else None


@dataclass(frozen=True)
class _Plan:
    mark: Mark | None  # None: nothing to write
    withdraw: bool = False
    runs: tuple[tuple[datetime, datetime], ...] = ()  # (occurrence, due) of each message
    late: int = 0
    missed: int = 0
    ended: bool = False  # no occurrence left


def _stale(entry: PeriodicEntry, version: int, mark: Mark | None, read_at: float) -> bool:
    """Whether ``mark`` is of a newer version than the entry held (read before a change,
    or a removal, that is written already), or the entry was read longer than
    ``MOST_READ_AGE`` ago (logged)."""
    if mark is not None and mark.version > version:
        return True
    if time.monotonic() - read_at <= MOST_READ_AGE:
        return False
    logger.warning("periodic entry %r: read too long ago, left to the next read", entry.name)
    return True
