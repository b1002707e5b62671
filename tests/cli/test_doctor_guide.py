"""The production guide's ``doctor`` samples are what ``doctor`` prints, on a Redis set up
as the guide recommends and on one set up as it warns against (docs/guides/redis-production.md)."""

from __future__ import annotations

import re

import pytest

from celery_delayq.testing import RedisServer, wait_until

from ..helpers import REPO_ROOT, invoke, standalone_mover

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]

GUIDE = REPO_ROOT / "docs" / "guides" / "redis-production.md"
DOCTOR = "$ celery -A proj delayq doctor"

#: What differs from run to run, and what the guide shows in its place.
VARYING = [
    (r"redis://127\.0\.0\.1:\d+/0", "redis://127.0.0.1:6379/0"),
    (r"redis version: (Redis|Valkey) [^\n]*", "redis version: Redis 7.0.15"),
    (r"clock is \d+ ms (ahead of|behind)", "clock is 0 ms ahead of"),
    (r"standalone mover \([^)]*\)", "standalone mover (vm)"),
]


def normalised(text: str) -> str:
    for pattern, replacement in VARYING:
        text = re.sub(pattern, replacement, text)
    return text.strip()


def guide_samples() -> list[str]:
    """The guide's ``doctor`` runs: command, output and ``# exit N``, in order."""
    blocks = re.findall(r"```(?:console|text)\n(.*?)```", GUIDE.read_text(), re.DOTALL)
    return [block.strip() for block in blocks if block.startswith(DOCTOR)]


def run_doctor(app) -> str:
    """``doctor``'s output as the guide shows it: prompt, output, exit status."""
    result = invoke(app, "doctor")
    return f"{DOCTOR}\n{result.output.strip()}\n# exit {result.exit_code}"


@pytest.mark.promise("doctor-guide-sample-real")
def test_the_guides_doctor_samples_are_its_real_output(make_app) -> None:
    recommended, warned_against = guide_samples()

    # As the guide recommends: AOF with appendfsync everysec, noeviction, a mover running.
    settings = ("--appendfsync", "everysec", "--maxmemory-policy", "noeviction")
    with RedisServer(*settings, appendonly=True) as server:
        app = make_app(url=server.url)
        with standalone_mover(server.url):
            wait_until(lambda: "[ok  ] movers" in invoke(app, "doctor").output, timeout=15)
            assert normalised(run_doctor(app)) == normalised(recommended)

    # No persistence, an evicting policy with a memory limit, no mover.
    lru = ("--maxmemory", "1073741824", "--maxmemory-policy", "allkeys-lru")
    with RedisServer(*lru) as server:
        app = make_app(url=server.url)
        assert normalised(run_doctor(app)) == normalised(warned_against)
