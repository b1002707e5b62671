"""benchmarks/flow_keys.py reads the batch a move call was asked for from its SLOWLOG
entry (a real one), and sums up the slow calls by it."""

from __future__ import annotations

import pytest
import redis

from benchmarks.flow_keys import move_limit, slow_calls_row, spread
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled

pytestmark = pytest.mark.integration  # the first test's real redis-server


def test_the_batch_is_read_from_a_real_move_calls_slowlog_entry(redis_client: redis.Redis):
    store = DelayedStore(redis_client, KeySpace(), 37)
    store.schedule(Scheduled("q", "m", "t", 0, "q", b"x"))
    before = redis_client.config_get("slowlog-log-slower-than")["slowlog-log-slower-than"]
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.slowlog_reset()
    try:
        assert store.move_due("q").moved == 1
        sha = store.state.scripts.move_due.sha.encode()
        entries = [
            bytes(entry["command"])
            for entry in redis_client.slowlog_get(100)
            if bytes(entry["command"]).startswith(b"EVALSHA " + sha)
        ]
    finally:
        redis_client.config_set("slowlog-log-slower-than", before)
    assert entries  # each move call the store made, asked for its batch of 37
    assert {move_limit(command) for command in entries} == {37}


@pytest.mark.parametrize("command", [b"", b"EVALSHA abc", b"EVALSHA abc x k1", b"EVALSHA a 1 k"])
def test_a_short_or_odd_entry_has_no_batch(command: bytes):
    assert move_limit(command) is None


def test_the_slow_calls_are_summed_up_by_their_batch():
    one = {"over_2ms": [(9000, 10), (6000, 200), (2500, 12), (2100, None)]}

    assert slow_calls_row("p, over 5 ms", one, 5000) == (
        "| p, over 5 ms | 2 | 10 / 10 / 200 / 200 / 200 | 1 | 9,000 at 10, 6,000 at 200 |"
    )
    assert slow_calls_row("p, over 2 ms", one, 2000).startswith("| p, over 2 ms | 4 | 10 / 10 / 12")
    assert spread([]) is None
