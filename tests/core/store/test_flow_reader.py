"""Reading flow control's buckets (store/flow.py) against a real Redis, with messages
published through a real Celery app under its limits and released by the real move: what
the reader says equals what was published, released and delivered."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.core.results import BucketState
from celery_delayq.core.store import DelayedStore
from celery_delayq.ops.buckets import read_limits, state_text
from celery_delayq.testing import wait_until

from ...helpers import publish_limited

pytestmark = pytest.mark.integration

SEND, RUN = "tests.send", "tests.run"


def delivered(store: DelayedStore) -> Counter[tuple[str, str | None]]:
    """The messages in the queue's list, per task and limit key: the truth of what was
    released."""
    found: Counter[tuple[str, str | None]] = Counter()
    for raw in store.client.lrange("default", 0, -1):
        headers = json.loads(raw)["headers"]
        found[headers["task"], headers.get("delayq_limit_key")] += 1
    return found


def by_name(buckets: list[BucketState]) -> dict[tuple[str, str | None], BucketState]:
    return {(b.task, b.key): b for b in buckets}


def test_concurrency_slots_waiting_and_released_equal_what_was_delivered(make_app: Any) -> None:
    app = make_app(delayq_concurrency_limits={RUN: 2}, delayq_concurrency_lease=1)
    publish_limited(app, RUN, 5)
    with open_store(app) as store:
        store.move_all_due()
        (bucket,) = store.buckets("default", 10_000)
        assert delivered(store) == {(RUN, None): 2}
        assert (bucket.task, bucket.key, str(bucket.limits)) == (RUN, None, "2 at once")
        assert (bucket.waiting, bucket.running, bucket.released) == (3, 2, 2)
        assert bucket.in_window == ()  # no rate: no window
        assert bucket.throttled and state_text(bucket).startswith("throttled for")
        # the slots' leases run out (1 s, by the Redis clock): no longer running, though
        # no move has dropped them yet (the reader writes nothing)
        lease_end = store.server_time_ms() + 1000
        wait_until(lambda: store.server_time_ms() > lease_end, what="the leases run out")
        (bucket,) = store.buckets("default")
        assert store.client.zcard(b"delayq:{default}:fc:r:" + bucket.name) == 2
        assert (bucket.waiting, bucket.running, bucket.throttled) == (3, 0, False)
        assert state_text(bucket) == "ready"


def test_rates_per_limit_key_count_releases_in_each_window(make_app: Any) -> None:
    app = make_app(delayq_rate_limits={SEND: ["20/s", "600/m"]})
    publish_limited(app, SEND, 6, key="a")
    publish_limited(app, SEND, 3, key="b")
    publish_limited(app, SEND, 2)
    with open_store(app) as store:
        store.move_all_due()  # each bucket's first goes at once; the next 1/20 s later
        first = by_name(store.buckets("default", 10_000))
        assert {name: (b.waiting, b.released) for name, b in first.items()} == {
            (SEND, "a"): (5, 1),
            (SEND, "b"): (2, 1),
            (SEND, None): (1, 1),
        }
        assert {str(b.limits) for b in first.values()} == {"20/s, 600/m"}
        assert all(b.in_window == (1, 1) for b in first.values())

        wait_until(lambda: store.move_all_due() and sum(delivered(store).values()) == 11)
        settled = store.server_time_ms()
        buckets = by_name(store.buckets("default", 10_000))
        truth = delivered(store)
        assert {name: b.released for name, b in buckets.items()} == truth
        assert {name: b.in_window for name, b in buckets.items()} == {
            name: (count, count) for name, count in truth.items()
        }  # all within the last second (20/s: 6 take 0.26 s) and minute
        assert all(b.waiting == 0 and state_text(b) == "idle" for b in buckets.values())
        assert not any(b.window_short for b in buckets.values())

        # a second on, by the Redis clock: out of the 1-s window, still in the 1-min one
        wait_until(lambda: store.server_time_ms() > settled + 1000, what="a second on")
        later = by_name(store.buckets("default", 10_000))
        assert {name: b.in_window for name, b in later.items()} == {
            name: (0, count) for name, count in truth.items()
        }

        # the log read bounded to its newest 4 entries: 4 counted, said to be short
        bounded = store.buckets("default", 4)
        assert sum(b.in_window[1] for b in bounded if b.in_window) == 4
        assert all(b.window_short for b in bounded)
        # no log counted: no window counts rather than made-up ones
        assert all(b.in_window is None for b in store.buckets("default"))

        flows = store.task_flows()  # released: the count per task, not the states'
        assert [(f.task, f.buckets, f.keyed, f.waiting, f.released) for f in flows] == [
            (SEND, 3, 2, 0, 11)
        ]


def test_a_paused_or_held_bucket_says_so_and_the_move_keeps_its_messages(make_app: Any) -> None:
    app = make_app(delayq_rate_limits={SEND: "1/s"})
    publish_limited(app, SEND, 3, key="paused")
    publish_limited(app, SEND, 3, key="held")
    with open_store(app) as store:
        store.move_all_due()
        keyed = SEND.encode() + b"\x00"  # the start of a limit key's bucket name
        prefix = b"delayq:{default}:fc:s:" + keyed
        store.client.hset(prefix + b"paused", "hold", "paused")
        hold_us = (store.server_time_ms() + 3_600_000) * 1000
        store.client.hset(prefix + b"held", "hold", hold_us)
        # the buckets come due (1/s) and a move finds them held: their next release then
        # waits for the hold
        held_ready = {keyed + b"paused": math.inf, keyed + b"held": hold_us}
        wait_until(lambda: store.move_all_due() and _ready(store) == held_ready, what="held")
        buckets = by_name(store.buckets("default", 10_000))
        assert delivered(store) == {(SEND, "paused"): 1, (SEND, "held"): 1}
        paused, held = buckets[SEND, "paused"], buckets[SEND, "held"]
        assert (paused.waiting, paused.held_until, paused.next_release) == (2, math.inf, math.inf)
        assert state_text(paused) == "paused"
        assert held.waiting == 2 and held.held_until == held.next_release == hold_us / 1e6
        assert state_text(held) in ("held for 60.0m", "held for 1.0h")  # an hour, less a bit

        listing = read_limits(store, 10_000, task=SEND, top=1)
        assert (listing.buckets, listing.waiting, listing.held, len(listing.shown)) == (2, 4, 2, 1)
        assert read_limits(store, 0, task="tests.other").buckets == 0


def _ready(store: DelayedStore) -> dict[bytes, float]:
    """The ready set: bucket -> when (us) its next message may go."""
    return dict(store.client.zrange("delayq:{default}:fc:ready", 0, -1, withscores=True))


def test_idle_buckets_are_found_by_the_index_with_no_scan_of_the_keyspace(
    make_app: Any,
) -> None:
    app = make_app(delayq_rate_limits={SEND: "1/m"})
    publish_limited(app, SEND, 1, queue="limited")
    app.send_task("tests.plain", countdown=60, queue="plain")
    with open_store(app) as store:
        store.move_all_due()  # the limited message released: its bucket idle, no ready set
        assert not store.client.exists("delayq:{limited}:fc:ready")

        def scans() -> int:
            return int(store.client.info("commandstats").get("cmdstat_scan", {}).get("calls", 0))

        before = scans()
        assert store.buckets("plain") == []
        assert [b.released for b in store.buckets("limited")] == [1]  # found by the index
        assert scans() == before
