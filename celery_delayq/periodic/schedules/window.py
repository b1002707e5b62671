"""An entry's own bounds on its schedule, as django-celery-beat's ``PeriodicTask`` has
them: ``start_time`` (no occurrence before it), ``expires`` (none after it: the entry has
ended) and ``one_off`` (only its first occurrence runs).

They wrap the schedule's "next time after" function, so every kind of schedule is bounded
alike and every beat names the same occurrences: a one-off's one occurrence is the first
from its ``start_time``, else the first after the entry was created (its anchor, which the
store keeps), whenever it is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["NextTime", "Window"]

#: The schedule's next occurrence strictly after an instant (UTC), or None.
NextTime = Callable[[datetime], "datetime | None"]
#: Just before ``start_time``: an occurrence at the start time itself runs.
_TICK = timedelta(microseconds=1)
_UNKNOWN = object()


@dataclass(frozen=True)
class Window:
    """``start`` and ``end`` (aware UTC, or None), ``once``, and ``origin``: the instant
    after which a one-off's occurrence is looked for when it has no ``start``."""

    start: datetime | None = None
    end: datetime | None = None
    once: bool = False
    origin: datetime | None = None

    def bound(self, next_after: NextTime) -> NextTime:
        """``next_after`` within this window (itself when the window bounds nothing)."""
        if self.start is None and self.end is None and not self.once:
            return next_after
        return _Bounded(self, next_after)


class _Bounded:
    """A schedule's next time, within a window."""

    def __init__(self, window: Window, next_after: NextTime) -> None:
        self.window = window
        self.next_after = next_after
        self.since = window.origin if window.start is None else window.start - _TICK
        if window.once and self.since is None:
            raise ValueError("a one-off entry needs a start time or an anchor")
        self.first: datetime | None | object = _UNKNOWN  # a one-off's occurrence, found once

    def __call__(self, moment: datetime) -> datetime | None:
        if not self.window.once:
            return self.within(moment)
        if self.first is _UNKNOWN:
            assert self.since is not None
            self.first = self.within(self.since)
        only = self.first
        return only if isinstance(only, datetime) and only > moment else None

    def within(self, moment: datetime) -> datetime | None:
        """The next time after ``moment``, from the start on; None past the end."""
        start, end = self.window.start, self.window.end
        if start is not None and moment < start - _TICK:
            moment = start - _TICK
        found = self.next_after(moment)
        return None if found is None or (end is not None and found > end) else found
