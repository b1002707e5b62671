"""The bounds a worker's starts keep under a rate limit on a broker elsewhere: each
starts after its release (celery_delayq.testing.releases reads the release log), and
so they keep the releases' pace, give or take the delay from a release to its start."""

from __future__ import annotations

import redis

from celery_delayq.core.layout.gates import Rate
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.testing.releases import most_in_window, release_log

from ..helpers import runs


def assert_within_rate(times_us: list[int], rate: str) -> None:
    """No window of the rate's length holds more releases than the rate allows."""
    limit = Rate.parse(rate)
    assert most_in_window(times_us, limit.seconds * 1_000_000) <= limit.count


def assert_each_started_after_its_release(starts: list[float], releases_us: list[int]) -> float:
    """The k-th start (epoch seconds) comes after the k-th release (no task ran
    unreleased); the worst delay from a release to its start (the jitter a worker adds
    to the releases' pace)."""
    assert len(starts) == len(releases_us)
    delays = [start - us / 1e6 for start, us in zip(sorted(starts), sorted(releases_us))]
    assert min(delays) >= 0, f"a task started {-min(delays):.3f} s before its release"
    return max(delays)


def assert_starts_spaced(starts: list[float], rate: str, jitter: float) -> None:
    """Starts keep the releases' pace, give or take the jitter: consecutive starts are an
    interval apart less the catch-up and the jitter, and no window of the rate's length
    less the jitter holds more starts than the rate allows."""
    limit = Rate.parse(rate)
    most = int(limit.count)
    ordered = sorted(starts)
    least_gap = (limit.interval_us() - limit.catch_up_us()) / 1e6 - jitter
    for first, second in zip(ordered, ordered[1:]):
        assert second - first >= least_gap, f"starts {second - first:.3f} s apart"
    for first, last in zip(ordered, ordered[most:]):
        assert last - first >= limit.seconds - jitter, f"{most + 1} starts in {last - first:.3f} s"


def store_empty(client: redis.Redis, shards: list[QueueKeys]) -> bool:
    """No message of the queue is left in its store: none pending, waiting in a bucket,
    or claimed (every claim was acked after the broker confirmed it)."""
    return not any(client.hlen(keys.messages) or client.zcard(keys.inflight) for keys in shards)


def assert_released_at_the_rate_each_once(
    client: redis.Redis,
    task: str,
    sent_ids: list[str],
    shard: QueueKeys,
    stats: dict[str, int],
    rate: str,
) -> None:
    """Every message sent ran once; each was released once (the log, the queue's
    counters), within the rate; and the starts kept the releases' pace."""
    recorded = runs(client)
    assert sorted(run["id"] for run in recorded) == sorted(sent_ids)
    releases = release_log(client, shard).get(task, [])
    assert len(releases) == len(sent_ids) == stats["released"] == stats["gated"]
    assert_within_rate(releases, rate)
    starts = [run["at"] for run in recorded]
    jitter = assert_each_started_after_its_release(starts, releases)
    assert_starts_spaced(starts, rate, jitter)
