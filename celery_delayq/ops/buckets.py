"""Flow control's buckets as operators read them: for ``celery delayq limits``, the
flow-control part of ``celery delayq status``, and the dashboard's Limits page alike."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.layout.gates import UNITS
from ..core.results import BucketState, TaskFlow
from ..core.store import DelayedStore
from .when import ago, iso

#: Buckets listed by default: those with the most messages waiting.
DEFAULT_TOP = 20


@dataclass(frozen=True)
class LimitsListing:
    """The buckets that match a filter, the top ``len(shown)`` by waiting, and totals of
    all that matched."""

    shown: list[BucketState]
    buckets: int
    waiting: int
    running: int
    held: int
    throttled: int


def read_limits(
    store: DelayedStore,
    log_entries: int,
    *,
    queue: str | None = None,
    task: str | None = None,
    top: int = DEFAULT_TOP,
) -> LimitsListing:
    """The buckets of ``queue`` (every queue: None) and ``task`` (every task: None),
    most waiting first. ``log_entries``: see ``DelayedStore.buckets``."""
    queues = [queue] if queue is not None else store.queues()
    found = [
        bucket
        for name in queues
        for bucket in store.buckets(name, log_entries)
        if task is None or bucket.task == task
    ]
    found.sort(key=lambda b: (-b.waiting, b.queue, b.name))
    return LimitsListing(
        shown=found[: max(top, 0)],
        buckets=len(found),
        waiting=sum(b.waiting for b in found),
        running=sum(b.running for b in found),
        held=sum(b.held for b in found),
        throttled=sum(b.throttled for b in found),
    )


def limits_text(bucket: BucketState) -> str:
    return "unknown (state forgotten)" if bucket.limits is None else str(bucket.limits)


def released_text(bucket: BucketState) -> str:
    """Releases in each rate's current window: ``3 in 1s, 41 in 1m`` (``>=`` when the
    log read did not reach back over the whole window); ``-`` without rates or a log."""
    if bucket.limits is None or bucket.in_window is None or not bucket.limits.rates:
        return "-"
    at_least = ">=" if bucket.window_short else ""
    return ", ".join(
        f"{at_least}{count} in {_window(rate.seconds)}"
        for rate, count in zip(bucket.limits.rates, bucket.in_window)
    )


def running_text(bucket: BucketState) -> str:
    """Running of the most allowed at once: ``2/5``; ``-`` without a concurrency limit."""
    most = bucket.limits.concurrency if bucket.limits else None
    if most is None:
        return str(bucket.running) if bucket.running else "-"
    return f"{bucket.running}/{most}"


def state_text(bucket: BucketState) -> str:
    """``paused``, ``held for 2.0m``, ``throttled for 0.4s`` (messages wait for their
    limits), ``ready`` (the next may go now) or ``idle`` (nothing waits)."""
    if bucket.held_until == math.inf or bucket.next_release == math.inf:
        return "paused"
    if bucket.held_until is not None:
        return f"held for {ago(bucket.held_until - bucket.now)}"
    if bucket.next_release is None:
        return "idle"
    if bucket.throttled:
        return f"throttled for {ago(bucket.next_release - bucket.now)}"
    return "ready"


def bucket_json(bucket: BucketState) -> dict[str, Any]:
    rates = bucket.limits.rates if bucket.limits else ()
    return {
        "queue": bucket.queue,
        "shard": bucket.shard,
        "task": bucket.task,
        "key": bucket.key,
        "limits": None if bucket.limits is None else str(bucket.limits),
        "waiting": bucket.waiting,
        "released": bucket.released,
        "released_in_window": None
        if bucket.in_window is None
        else [
            {"rate": str(rate), "released": count, "at_least": bucket.window_short}
            for rate, count in zip(rates, bucket.in_window)
        ],
        "running": bucket.running,
        "concurrency": bucket.limits.concurrency if bucket.limits else None,
        "held_until": _moment(bucket.held_until),
        "next_release": _moment(bucket.next_release),
        "state": state_text(bucket),
    }


def flow_json(flow: TaskFlow) -> dict[str, Any]:
    return dict(vars(flow))


def _moment(seconds: float | None) -> str | None:
    """ISO 8601, or ``"paused"`` for never."""
    if seconds is None:
        return None
    return "paused" if seconds == math.inf else iso(seconds)


def _window(seconds: int) -> str:
    return next((f"1{unit}" for unit, size in UNITS.items() if size == seconds), f"{seconds}s")
