"""benchmarks/flow_rate.py counts a rate limit's windows half-open, and lost and doubled
runs by task id."""

from __future__ import annotations

import pytest

from benchmarks.flow_rate import (
    Figures,
    Observed,
    most_in_window,
    per_rate,
    per_second,
    pickup,
    uncovered,
)

pytestmark = pytest.mark.unit


def test_a_window_holds_its_start_and_not_its_end() -> None:
    assert most_in_window([0.0, 0.5, 1.0, 1.2]) == [2, 3, 2, 1]
    ten_a_second = [n / 10 for n in range(11)]  # 0.0 .. 1.0: eleven in 1.0 s closed
    assert max(most_in_window(ten_a_second)) == 10
    assert max(most_in_window([*ten_a_second[:10], 0.9999])) == 11
    assert most_in_window([]) == []


def test_rates_run_from_the_first_to_the_last() -> None:
    assert per_rate([1.0, 1.5, 2.0, 3.0]) == pytest.approx(1.5)
    assert per_rate([1.0]) is None
    assert per_rate([1.0, 1.5, 2.0, 3.0], idle=1.0) == pytest.approx(3.0)
    assert per_second([10.2, 10.9, 11.0, 13.5], origin=10.0) == ([0.5, 1.5, 2.5, 3.5], [2, 1, 0, 1])


def test_figures_count_lost_and_doubled_task_ids_and_windows_over() -> None:
    starts = [(0.0, "a"), (0.1, "b"), (0.2, "b"), (5.0, "c")]
    releases = [0.0, 0.1, 0.2]
    observed = Observed("delayq", 0.0, ["a", "b", "c", "d"], starts, releases, 3, [(0.05, 9.0)])
    figures = Figures.of(observed, rate=2)
    assert (figures.sent, figures.ran, figures.lost, figures.doubles) == (4, 3, 1, 1)
    assert (figures.most_releases, figures.release_windows_over) == (3, 1)
    assert (figures.most_starts, figures.start_windows_over) == (3, 0)  # over rate + 1
    assert figures.took == 5.0
    assert figures.no_mover == pytest.approx(0.05)
    assert figures.pickup is None  # 4 starts, 3 releases: no pairing


def test_a_start_is_paired_with_the_release_of_its_rank() -> None:
    releases = [float(n) for n in range(100)]
    starts = [n + 0.002 for n in range(99)] + [99.150]
    assert pickup(starts, releases) == pytest.approx((2.0, 2.0, 150.0))


def test_no_mover_up_is_the_time_no_life_covers() -> None:
    lives = [(0.5, 2.0), (1.5, 3.0), (4.0, 9.0)]  # up 0.5-3.0 (overlapping), 4.0-9.0
    assert uncovered(lives, 0.0, 10.0) == pytest.approx(0.5 + 1.0 + 1.0)
    assert uncovered(lives, 1.0, 2.5) == 0.0
    assert uncovered([], 1.0, 2.5) == pytest.approx(1.5)
