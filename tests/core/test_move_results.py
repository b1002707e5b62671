"""Move results of separate shards merge one way (core/results.py): the counts summed,
and the next wake the earliest any shard needs; a shard's calls in one pass add up to
its last call's next due time."""

from __future__ import annotations

import pytest

from celery_delayq.core.results import MoveResult

pytestmark = pytest.mark.unit

NOW = 1_000_000


def server_ms() -> int:
    raise AssertionError("the server's time is asked only when there is no result")


def test_the_counts_are_summed_and_the_worst_lateness_kept() -> None:
    merged = MoveResult.merged(
        [MoveResult(3, None, NOW, 1, 40, 0.002), MoveResult(5, None, NOW + 2, 0, 90, 0.003)],
        server_ms,
    )
    assert (merged.moved, merged.missing, merged.max_lateness_ms) == (8, 1, 90)
    assert merged.now_ms == NOW + 2 and merged.next_due_ms is None
    assert merged.seconds_until_next() is None


def test_the_next_wake_is_the_earliest_any_shard_needs_with_its_own_lead() -> None:
    """Due at +500 with a lead of 450 (a dense instant) wakes before due at +100."""
    dense = MoveResult(0, NOW + 500, NOW, next_lead_ms=450)
    plain = MoveResult(0, NOW + 100, NOW)
    merged = MoveResult.merged([plain, dense], server_ms)
    assert (merged.next_due_ms, merged.next_lead_ms) == (NOW + 500, 450)
    assert merged.seconds_until_next() == 0.05
    # the largest lead of one shard is not paired with another shard's due time
    far = MoveResult(0, NOW + 5_000, NOW, next_lead_ms=4_000)
    soon = MoveResult(0, NOW + 200, NOW)
    assert MoveResult.merged([far, soon], server_ms).seconds_until_next() == 0.2


def test_a_shard_with_more_due_makes_the_merge_more_due() -> None:
    stopped_by_its_batch = MoveResult(500, NOW - 10, NOW)
    idle = MoveResult(0, NOW + 1_000, NOW)
    merged = MoveResult.merged([idle, stopped_by_its_batch], server_ms)
    assert merged.more_due and merged.seconds_until_next() == 0


def test_more_due_wins_over_a_wake_time_that_another_shards_lead_puts_before_now() -> None:
    """Due at +100 with a lead of 300 wakes at -200, before the shard stopped by its
    batch (due now): the merge still says more is due, and passes again at once."""
    stopped_by_its_batch = MoveResult(500, NOW, NOW)
    led = MoveResult(0, NOW + 100, NOW, next_lead_ms=300)
    for results in ([stopped_by_its_batch, led], [led, stopped_by_its_batch]):
        merged = MoveResult.merged(results, server_ms)
        assert merged.more_due and merged.seconds_until_next() == 0
        assert (merged.moved, merged.next_due_ms, merged.next_lead_ms) == (500, NOW, 0)


def test_nothing_merged_takes_the_servers_time() -> None:
    merged = MoveResult.merged([], lambda: NOW)
    assert (merged.moved, merged.next_due_ms, merged.now_ms) == (0, None, NOW)


def test_a_shards_later_call_holds_its_next_due_time_and_adds_its_counts() -> None:
    first = MoveResult(500, NOW, NOW, 2, 70, 0.001, 0)  # stopped by its batch: more due
    last = MoveResult(20, NOW + 3_000, NOW + 5, 0, 30, 0.0005, 100)
    both = first.then(last)
    assert (both.moved, both.missing, both.max_lateness_ms) == (520, 2, 70)
    assert (both.next_due_ms, both.now_ms, both.next_lead_ms) == (NOW + 3_000, NOW + 5, 100)
    assert not both.more_due
