"""The server version check of ``doctor``: the supported servers by name, a failure below
the oldest (tests/CI run the oldest and the newest: README, "Redis versions")."""

from __future__ import annotations

import pytest

from celery_delayq.core.health.health_checks import (
    FAIL,
    OK,
    SUPPORTED_SERVERS,
    _version,
    server_findings,
)

pytestmark = pytest.mark.integration


def test_the_server_the_suite_runs_on_is_supported_and_named(redis_client):
    info = redis_client.info("server")

    (finding,) = [f for f in server_findings(redis_client) if f.check == "redis version"]

    assert finding.level == OK
    assert info["redis_version"] in finding.message
    if "valkey_version" in info:
        assert finding.message.startswith(f"Valkey {info['valkey_version']}")


@pytest.mark.parametrize(
    ("info", "level", "shown"),
    [
        ({"redis_version": "6.0.16"}, FAIL, "Redis 6.0.16 is too old"),
        ({"redis_version": "5.0.7"}, FAIL, "Redis 5.0.7 is too old"),
        ({"redis_version": "6.2.14"}, OK, "Redis 6.2.14"),
        ({"redis_version": "7.0.15"}, OK, "Redis 7.0.15"),
        ({"redis_version": "7.2.4", "valkey_version": "8.1.8"}, OK, "Valkey 8.1.8 (Redis 7.2.4)"),
        ({}, FAIL, "Redis 0 is too old"),
    ],
)
def test_servers_below_the_oldest_supported_fail_with_the_supported_ones_named(info, level, shown):
    finding = _version(info)

    assert (finding.level, finding.message) == (level, shown)
    if level == FAIL:
        assert SUPPORTED_SERVERS in finding.fix
