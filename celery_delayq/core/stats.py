"""The counters each queue keeps in its stats hash (``P:{Q}:stats``), written by the Lua
scripts themselves so every reader sees the same cluster-wide numbers."""

from __future__ import annotations

#: Upper bounds (ms) of the move-lateness histogram kept in each queue's stats hash.
LATENESS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)

#: Fields of the stats hash that number pages and duplicates (not counters to report).
NUMBERING_FIELDS = ("page_seq", "dup_seq")


def counters(raw: dict[bytes, bytes]) -> dict[str, int]:
    """The reportable counters of a stats hash as read from Redis."""
    values = {key.decode(): int(value) for key, value in raw.items()}
    return {key: value for key, value in values.items() if key not in NUMBERING_FIELDS}
