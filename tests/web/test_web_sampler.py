"""The moves and lateness the dashboard charts: quantiles from histogram counters, and
intervals between two samples of the store's totals."""

from __future__ import annotations

import pytest

from celery_delayq.core.layout.queue_counters import LATENESS_BUCKETS_MS, lateness_quantile_ms
from celery_delayq.web.sampler import CounterSampler, interval

pytestmark = pytest.mark.unit


def test_the_quantile_is_the_bound_of_the_bucket_that_holds_it() -> None:
    counters = {"late_le_5": 90, "late_le_25": 9, "late_le_1000": 1}
    assert lateness_quantile_ms(counters, 0.5) == 5.0
    assert lateness_quantile_ms(counters, 0.95) == 25.0
    assert lateness_quantile_ms(counters, 0.999) == 1000.0
    assert lateness_quantile_ms({"late_le_inf": 3}, 0.99) == float(LATENESS_BUCKETS_MS[-1])
    assert lateness_quantile_ms({}, 0.99) is None


def test_an_interval_is_the_growth_between_two_samples() -> None:
    before = (100.0, {"moved": 10, "late_count": 10, "late_sum_ms": 50, "late_le_5": 10})
    after = (
        110.0,
        {"moved": 60, "late_count": 60, "late_sum_ms": 550, "late_le_5": 10, "late_le_10": 50},
    )
    moved = interval(before, after)
    assert moved.moved_per_second == 5.0
    assert moved.mean_lateness_ms == 10.0
    assert moved.p99_lateness_ms == 10.0
    idle = interval(after, (120.0, after[1]))
    assert (idle.moved_per_second, idle.mean_lateness_ms, idle.p99_lateness_ms) == (0, None, None)


def test_a_failed_read_leaves_a_gap_and_the_hour_is_bounded() -> None:
    readings = iter(
        [{"moved": 1}, ConnectionError("down"), {"moved": 3}, {"moved": 6}, {"moved": 9}]
    )

    def read() -> dict[str, int]:
        value = next(readings)
        if isinstance(value, Exception):
            raise value
        return value

    sampler = CounterSampler(read, every=1800.0, keep=3600.0)  # keeps 3 samples
    for _ in range(4):
        sampler.sample()
    assert [totals["moved"] for _, totals in sampler.samples] == [1, 3, 6]
    assert len(sampler.intervals()) == 2
    sampler.sample()  # past the bound: the oldest goes
    assert [totals["moved"] for _, totals in sampler.samples] == [3, 6, 9]
