"""What a periodic entry leaves behind: the headers of the messages it sends, its mark in the
store (the version written, the last occurrence written ahead, and where the version's
occurrences start), where a new version starts, and what one advance of the writer did."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from .entry import from_ms
from .registry import read_version

#: The header of every message a periodic entry sends: the occurrence it stands for, in
#: ISO 8601 UTC.
OCCURRENCE_HEADER = "delayq-occurrence"
#: The header naming the entry.
ENTRY_HEADER = "delayq-periodic"
#: The header of an entry whose ``overlap`` is ``skip`` (value ``"skip"``; absent for
#: ``allow``): the worker skips a run that would overlap the entry's previous one.
OVERLAP_HEADER = "delayq-overlap"
#: 9999-12-31 in ms: the last day a datetime holds.
LAST_MS = 253_402_214_400_000


@dataclass(frozen=True)
class Mark:
    """What the store keeps of an entry in its queue: the version written, and the last
    occurrence written ahead (None: the entry is paused, or removed).

    ``since_ms``: the end of the settle window of the change that made this version (0:
    none): occurrences due by then may be an older version's, still pending, and this
    version's start after it. ``removed``: a tombstone, left by a removal so that a beat
    still holding the removed entry (an older version) cannot write it again.

    As text: ``"<version> <last ms>|paused|removed[ <since ms>]"``;
    core/lua/write_ahead.lua reads the version of the same grammar (a mark it cannot read
    counts as version 0)."""

    version: int
    up_to_ms: int | None
    since_ms: int = 0
    removed: bool = False

    def text(self) -> str:
        state = "removed" if self.removed else "paused" if self.up_to_ms is None else self.up_to_ms
        return f"{self.version} {state}" + (f" {self.since_ms}" if self.since_ms else "")

    @classmethod
    def parse(cls, text: str | None) -> Mark | None:
        """The mark of ``text``; None for no mark, or one this code did not write (then
        the entry is written anew, withdrawing what the old mark covered)."""
        parts = (text or "").split(" ")
        if len(parts) not in (2, 3):
            return None
        number = read_version(parts[0])
        since = _read_ms(parts[2]) if len(parts) == 3 else 0
        if number is None or since is None:
            return None
        if parts[1] in ("paused", "removed"):
            return cls(number, None, since, removed=parts[1] == "removed")
        up_to = _read_ms(parts[1])
        return None if up_to is None else cls(number, up_to, since)

    @property
    def pending(self) -> bool:
        """Whether occurrences of this mark's version may be pending after ``since_ms``
        (it is neither paused nor removed)."""
        return self.up_to_ms is not None


def change_start(mark: Mark | None, now: datetime, settle: timedelta) -> datetime:
    """Where a new version of an entry whose mark is ``mark`` starts, changed at ``now``:
    after the settle window when occurrences are pending (a mover may have moved those
    due within it already: they stay, and rewriting one would run it twice); else at
    ``now``, or at the end of the settle window of the pause or removal before."""
    if mark is None:
        return now
    if mark.pending:
        return now + settle
    return max(now, _moment(mark.since_ms))


def runs_from(version: int, mark: Mark | None, now: datetime, settle: timedelta) -> datetime:
    """After when the entry at ``version`` runs, as the writer writes it: where its
    version started, or would start if written now (``change_start``)."""
    if mark is not None and mark.version == version:
        return max(now, _moment(mark.since_ms))
    return change_start(mark, now, settle)


def _moment(ms: int) -> datetime:
    """A mark's time as a datetime; one past the calendar (crafted) as its last day."""
    return from_ms(min(ms, LAST_MS))


def _read_ms(text: str) -> int | None:
    """A time as a mark holds it (ms): up to 15 ASCII digits, else None."""
    return int(text) if text.isdigit() and len(text) <= 15 and text.isascii() else None


@dataclass(frozen=True)
class Advance:
    """What one ``advance`` did for one entry."""

    stored: int = 0  # occurrences written ahead
    withdrawn: int = 0  # occurrences of an old version, or of a paused entry, withdrawn
    late: int = 0  # missed occurrences run late (catch_up "latest" or "all")
    missed: int = 0  # missed occurrences not run (catch_up, or past the bound)
    conflicts: int = 0  # times another beat had moved the mark first
    ended: bool = False  # the entry has no occurrence left (never fires, or ended)
    stale: bool = False  # a newer version is written: nothing was (the next read has it)
