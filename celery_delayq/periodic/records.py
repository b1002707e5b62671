"""What a periodic entry leaves behind: the headers of the messages it sends, its mark in the
store (the version written, and the last occurrence written ahead), and what one advance of
the writer did."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import read_version

#: The header of every message a periodic entry sends: the occurrence it stands for, in
#: ISO 8601 UTC.
OCCURRENCE_HEADER = "delayq-occurrence"
#: The header naming the entry.
ENTRY_HEADER = "delayq-periodic"


@dataclass(frozen=True)
class Mark:
    """What the store keeps of an entry in its queue: the version written, and the last
    occurrence written ahead (None: the entry is paused)."""

    version: int
    up_to_ms: int | None

    def text(self) -> str:
        return f"{self.version} {'paused' if self.up_to_ms is None else self.up_to_ms}"

    @classmethod
    def parse(cls, text: str | None) -> Mark | None:
        """The mark of ``text``; None for no mark, or one this code did not write (then
        the entry is written anew, withdrawing what the old mark covered)."""
        if not text:
            return None
        version, _, up_to = text.partition(" ")
        number = read_version(version)
        if number is None:
            return None
        if up_to == "paused":
            return cls(number, None)
        if not up_to.isdigit() or len(up_to) > 15 or not up_to.isascii():
            return None
        return cls(number, int(up_to))


@dataclass(frozen=True)
class Advance:
    """What one ``advance`` did for one entry."""

    stored: int = 0  # occurrences written ahead
    withdrawn: int = 0  # occurrences of an old version, or of a paused entry, withdrawn
    late: int = 0  # missed occurrences run late (catch_up "latest" or "all")
    missed: int = 0  # missed occurrences not run (catch_up, or past the bound)
    conflicts: int = 0  # times another beat had moved the mark first
    ended: bool = False  # the entry has no occurrence left (never fires, or ended)
