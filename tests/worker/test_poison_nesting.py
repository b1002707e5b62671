"""The poison guard's nesting walk against a plain recursive definition of depth."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from celery_delayq.worker.poison import nested_deeper

pytestmark = pytest.mark.unit

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=2), inner, max_size=3)
    ),
    max_leaves=40,
)


def depth(value: Any) -> int:
    """How deep ``value`` nests containers: 0 for a scalar, 1 for a flat list."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return 1 + max((depth(child) for child in value), default=0)
    return 0


@given(st.lists(VALUES, max_size=3), st.integers(min_value=0, max_value=6))
def test_the_walk_finds_what_nests_deeper_than_the_limit(values: list[Any], limit: int) -> None:
    deepest = max((depth(value) for value in values), default=0)
    assert nested_deeper(limit, *values) is (deepest > limit)


def test_a_nesting_too_deep_for_recursion_is_found_without_recursing() -> None:
    value: Any = 0
    for _ in range(100_000):
        value = [value]
    assert nested_deeper(64, value)
    assert not nested_deeper(100_000, value)
