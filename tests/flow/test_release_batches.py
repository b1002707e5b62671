"""The move calls that only release (every due message already in its bucket) are sized
as the calls that move: their batch grows while they are quick and shrinks while they
are slow (core/batching.py), on a real Redis."""

from __future__ import annotations

import pytest
import redis

from celery_delayq.core.batching import FIRST, LEAST
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled

from .harness import gate_of

pytestmark = pytest.mark.integration

KEYS = 3000


def releases_per_call(client: redis.Redis, budget: float) -> tuple[list[int], int]:
    """``KEYS`` keys limited to 1/s, one due message each (in its bucket since its
    publish), released by calls of batches sized within ``budget`` seconds, up to 1,000:
    the releases of each call, and the batch the store settled on."""
    store = DelayedStore(client, KeySpace(), 1000, move_call_budget=budget)
    due = store.server_time_ms() - 1
    store.schedule_many(
        Scheduled("q", f"m{i}", None, due, "q", b"{}", gate=gate_of(("1/s",), key=f"k{i}"))
        for i in range(KEYS)
    )
    assert client.zcard(store.keys.for_queue("q").pages) == 0  # all in their buckets
    released = []
    while moved := store.move_due("q").moved:
        released.append(moved)
    assert client.llen("q") == KEYS  # each released once
    return released, store.batch.size


def test_release_batches_grow_while_calls_are_within_the_budget(redis_client) -> None:
    """A call releases a third of its batch (a release weighs three moves); one that
    released all it may counts as a full batch, so with a budget every call meets (1 s)
    the batch doubles call by call up to ``delayq_move_batch_size``: 64 (21 releases),
    128, 256, 512, 1,000 (333). Counting 21 releases as 63 of 64, the batch stayed put."""
    released, settled = releases_per_call(redis_client, budget=1.0)

    assert released[:5] == [FIRST // 3, 2 * FIRST // 3, 4 * FIRST // 3, 8 * FIRST // 3, 333]
    assert settled == 1000


def test_release_batches_shrink_while_calls_take_longer_than_the_budget(redis_client) -> None:
    released, settled = releases_per_call(redis_client, budget=1e-6)

    assert released[:3] == [FIRST // 3, FIRST // 6, FIRST // 12]
    assert set(released[3:-1]) == {LEAST // 3}
    assert settled == LEAST
