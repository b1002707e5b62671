"""Unit tests run without any server: asking for one is a mistake in the test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def redis_server() -> None:
    pytest.fail("a unit test asked for a Redis server: move it to tests/integration")
