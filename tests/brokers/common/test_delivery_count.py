"""A delivery count read from a header or attribute (``count_of``): a whole number, or 0
when the value is not one, whatever a hostile or broken publisher put there."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from celery_delayq.brokers.common.message import count_of

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (3, 3),
        ("4", 4),
        (" 5 ", 5),
        (b"6", 6),
        (bytearray(b"7"), 7),
        (2.9, 2),
        (Decimal("3.5"), 3),
        (10**30, 10**30),
        (-2, 0),
    ],
)
def test_a_whole_number_is_read_as_int_reads_it(value: Any, count: int) -> None:
    assert count_of(value) == count


@pytest.mark.parametrize(
    "value",
    [None, True, False, "x", "1e3", float("inf"), float("nan"), [1], {"a": 1}, (), object()],
)
def test_anything_else_counts_as_nothing(value: Any) -> None:
    assert count_of(value) == 0
