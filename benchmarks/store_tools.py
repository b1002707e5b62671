"""Direct access to celery-delayq's store, with no Celery around it.

The move-rate, Redis-blocking, producer-limit and scale-out scenarios measure the
store's Lua scripts themselves, so they fill the store through the store's public
``DelayedStore.schedule_many`` (pipelined ``schedule.lua`` calls, the very KEYS/ARGV
the transport sends) instead of paying for ``apply_async`` a million times.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import uuid

import redis

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.layout.queue_counters import lateness_quantile_ms
from celery_delayq.core.store import DelayedStore, Scheduled

#: Filler that brings a synthetic payload to about the size of a real ``bench.record``
#: message (kombu's JSON envelope is ~900 bytes with its headers and base64 body).
_PAD = "x" * 820


def make_store(url: str, batch_size: int = 500, call_budget: float = 0.0) -> DelayedStore:
    """A store with the default key layout; batches of exactly ``batch_size`` unless a
    ``call_budget`` (``delayq_move_call_budget``, seconds) sizes them by time."""
    return DelayedStore(
        redis.Redis.from_url(url), KeySpace(), batch_size, move_call_budget=call_budget
    )


def payload(index: int, size: int | None = None, lead: bytes = b"") -> bytes:
    """A message whose first field is a unique, fixed-width id: kombu-sized by default,
    else padded to exactly ``size`` bytes; ``lead`` comes first (a space keeps the JSON
    valid and makes the store's record prefixed, not inline)."""
    if size is None:
        return lead + json.dumps({"id": f"{index:09d}", "pad": _PAD}).encode()
    head = lead + b'{"id": "%09d", "pad": "' % index
    return head + b"x" * (size - len(head) - 2) + b'"}'


def task_id(index: int) -> str:
    """A Celery-like task id (a canonical uuid, as ``apply_async`` makes), fixed by index."""
    return str(uuid.UUID(int=index + 1, version=4))


def payload_id(raw: bytes) -> int:
    """The id ``payload`` wrote, read without a JSON parse (fast for a million); the
    delivered envelope may start with the store's due-time key (record.py)."""
    at = raw.index(b'"id": "') + 7
    return int(raw[at : at + 9])


def fill(
    store: DelayedStore,
    queue: str,
    count: int,
    due_ms: int,
    *,
    start: int = 0,
    size: int | None = None,
    spread_ms: int = 0,
    lead: bytes = b"",
) -> float:
    """Schedule ``count`` messages (ids ``start``..) due at ``due_ms`` (plus a spread of
    ``spread_ms`` over them), each with its own uuid task id, payloads made by
    ``payload``; returns seconds."""
    began = time.perf_counter()
    store.schedule_many(
        Scheduled(
            queue=queue,
            message_id=f"m{i}",
            task_id=task_id(i),
            due_ms=due_ms + (i * spread_ms) // max(count, 1),
            destination=queue,
            payload=payload(i, size, lead),
        )
        for i in range(start, start + count)
    )
    return time.perf_counter() - began


def delivered_ids(client: redis.Redis, list_key: str, chunk: int = 50_000) -> list[int]:
    """Every payload id now in ``list_key`` (with repeats, if any), read in chunks."""
    total = int(client.llen(list_key))
    ids: list[int] = []
    for low in range(0, total, chunk):
        ids.extend(payload_id(raw) for raw in client.lrange(list_key, low, low + chunk - 1))
    return ids


def keys_memory(client: redis.Redis) -> int:
    """Bytes every key of the database takes (``MEMORY USAGE`` of each, counting all of
    its elements, jemalloc's size classes included). Unlike ``used_memory`` this does not
    depend on what the server held before: Redis frees buffers of earlier work on its own
    schedule, which moved one measurement by ~15 B a message."""
    return sum(
        int(client.memory_usage(key, samples=0) or 0) for key in client.scan_iter(count=1000)
    )


def server_time_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _fill_share(url: str, queue: str, count: int, due_ms: int, start: int) -> None:
    fill(make_store(url), queue, count, due_ms, start=start)


def parallel_fill(url: str, queue: str, count: int, due_ms: int, processes: int = 2) -> float:
    """``fill`` split over ``processes`` spawned processes (building the calls is the
    bottleneck, not Redis); returns seconds."""
    share = -(-count // processes)
    began = time.perf_counter()
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        pool.starmap(
            _fill_share,
            [(url, queue, min(share, count - low), due_ms, low) for low in range(0, count, share)],
        )
    return time.perf_counter() - began


def move_lateness(url: str, queue: str) -> dict[str, float | None]:
    """p99 (as the bound of the bucket that holds it) and mean of the store's histogram."""
    stats = make_store(url).stats(queue)
    count = stats.get("late_count", 0)
    if not count:
        return {"move_p99": None, "move_mean": None}
    return {
        "move_p99": lateness_quantile_ms(stats, 0.99),
        "move_mean": stats.get("late_sum_ms", 0) / count,
    }


def mover_passes(url: str) -> tuple[int, float]:
    """Move passes of every mover so far, and the latest heartbeat time (Redis clock, s):
    two readings give the pass rate (heartbeats are at least a second apart)."""
    beats = make_store(url).movers.all()
    passes = sum(int(beat.get("passes", 0)) for beat in beats)
    return passes, max((float(beat.get("last_seen", 0)) for beat in beats), default=0.0)


def pass_rate(url: str, before: tuple[int, float]) -> float | None:
    """Passes per second since the reading ``before`` (None: no heartbeat since)."""
    passes, seen = mover_passes(url)
    if seen <= before[1]:
        return None
    return (passes - before[0]) / (seen - before[1])
