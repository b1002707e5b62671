"""The counters each queue keeps in its stats hash (``P:{Q}:stats``), written by the Lua
scripts themselves so every reader sees the same cluster-wide numbers."""

from __future__ import annotations

from collections.abc import Mapping

#: Upper bounds (ms) of the move-lateness histogram kept in each queue's stats hash.
LATENESS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)

#: Fields of the stats hash that number pages and duplicates (not counters to report).
NUMBERING_FIELDS = ("page_seq", "dup_seq")


def counters(raw: dict[bytes, bytes]) -> dict[str, int]:
    """The reportable counters of a stats hash as read from Redis."""
    values = {key.decode(): int(value) for key, value in raw.items()}
    return {key: value for key, value in values.items() if key not in NUMBERING_FIELDS}


def lateness_quantile_ms(counters: Mapping[str, int], q: float) -> float | None:
    """The upper bound (ms) of the lateness histogram's bucket that holds quantile ``q``,
    from a stats hash's ``late_le_*`` counters (or their growth over a while); the last
    bucket, which has no bound, reads as the largest bound. None when nothing was counted.
    """
    fields = [f"late_le_{bound}" for bound in LATENESS_BUCKETS_MS] + ["late_le_inf"]
    total = sum(counters.get(field, 0) for field in fields)
    if not total:
        return None
    seen = 0
    for bound, field in zip([*LATENESS_BUCKETS_MS, LATENESS_BUCKETS_MS[-1]], fields):
        seen += counters.get(field, 0)
        if seen >= q * total:
            return float(bound)
    return float(LATENESS_BUCKETS_MS[-1])
