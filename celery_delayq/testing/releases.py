"""Reading flow control's release log (core/lua/gates.lua: ``P:{Q}:fc:log``, "<us> <bucket>"
per release, newest first) for tests and benchmarks: who was released when, and the most
releases any window of a limit's length held."""

from __future__ import annotations

from collections.abc import Iterable

import redis

from ..core.layout.keys import QueueKeys
from ..core.redis_replies import list_reply
from ..core.store.flow import release_times


def release_log(client: redis.Redis, shard: QueueKeys) -> dict[str, list[int]]:
    """Each bucket's release times (us, by the Redis clock), oldest first."""
    entries = list_reply(client.lrange(shard.gate_log, 0, -1))
    return {
        bucket.decode("utf-8", "surrogatepass"): times
        for bucket, times in release_times(entries).items()
    }


def most_in_window(times_us: Iterable[int], window_us: int) -> int:
    """The most of ``times_us`` that any half-open window ``[t, t + window_us)`` holds."""
    ordered = sorted(times_us)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while ordered[first] <= at - window_us:
            first += 1
        most = max(most, last - first + 1)
    return most
