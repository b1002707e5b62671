"""Where the worker mover sits in the worker's start-up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ..helpers import NOWHERE, REPO_ROOT

pytestmark = pytest.mark.unit

STEP_ORDER = """
from celery.worker import WorkController
from tests.worker_app import app
worker = WorkController(app=app, pool_cls="prefork", concurrency=1)
print(" ".join(step.name.rsplit(".", 1)[-1] for step in worker.steps))
"""


@pytest.mark.parametrize("hash_seed", ["1", "3", "5"])
def test_the_mover_starts_after_the_pool_has_forked_whatever_the_hash_seed(hash_seed):
    """Unordered, the step set's iteration order (hash seed 3 or 5) started the mover
    thread before the prefork pool forked, and a child could inherit a held import
    lock and hang on its first delayed publish."""
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, BROKER_URL=NOWHERE)  # never connects
    order = subprocess.run(
        [sys.executable, "-c", STEP_ORDER],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    assert order.index("WorkerMover") > order.index("Pool")
