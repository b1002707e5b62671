"""``celery_delayq.testing.wait_until``, the one way tests, benchmarks and chaos wait."""

from __future__ import annotations

import time

import pytest

from celery_delayq.testing import WaitAborted, wait_until

pytestmark = pytest.mark.unit


def test_wait_until_returns_the_first_truthy_value() -> None:
    values = iter([0, None, [], "ready", "later"])
    assert wait_until(lambda: next(values), interval=0) == "ready"


def test_wait_until_names_what_it_waited_for_when_time_is_up() -> None:
    calls: list[float] = []
    with pytest.raises(TimeoutError, match="timed out after 0.05s waiting until the sun rises"):
        wait_until(lambda: calls.append(time.monotonic()), timeout=0.05, what="the sun rises")
    assert calls[-1] - calls[0] >= 0.05  # it kept looking until the deadline


def test_wait_until_gives_up_at_once_when_told_why() -> None:
    calls: list[int] = []
    with pytest.raises(WaitAborted, match="the worker exited"):
        wait_until(lambda: calls.append(1), timeout=60, abort=lambda: "the worker exited")
    assert calls == [1]  # looked once, then gave up without waiting for the deadline
