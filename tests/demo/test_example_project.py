"""The example project's demo works end to end, exactly as a user would run it.

It runs ``python -m example_project.demo`` from the repository root, without
``REDIS_URL``, so the demo starts its own Redis and a real prefork worker; this is the
one test that checks real timing through a real worker process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ..helpers import REPO_ROOT

pytestmark = pytest.mark.system

DEMO_TIMEOUT = 90

#: Every run the demo's table must list (the cancelled task must not be among them).
EXPECTED_RUNS = {
    "countdown=0",
    "countdown=0.5",
    "countdown=1",
    "countdown=2",
    "countdown=3",
    "countdown=5",
    "eta=now+2.5s",
    "retry, attempt 1",
    "retry, attempt 2",
    "rescheduled 10s->1.5s",
}
CANCELLED = "cancelled (countdown=3)"

#: A table row of a run that happened: task, requested ETA, actual start, lateness (ms).
TIME = r"\d\d:\d\d:\d\d\.\d{3}"
ROW = re.compile(rf"^(?P<task>\S.*?)\s{{2,}}{TIME}\s+{TIME}\s+(?P<late>-?\d+\.\d)$")


def run_demo(broker_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the demo (on RabbitMQ with ``broker_url``); on timeout, SIGTERM it first so it
    can stop its worker and Redis."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "BROKER_URL")}
    if broker_url:
        env["BROKER_URL"] = broker_url
    command = [sys.executable, "-m", "example_project.demo"]
    with subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=DEMO_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                stdout, stderr = process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                stdout, stderr = process.communicate()
            pytest.fail(f"demo took over {DEMO_TIMEOUT}s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.promise("never-starts-early")
def test_demo_runs_every_task_never_early_and_not_the_cancelled_one() -> None:
    check(run_demo())


@pytest.mark.slow
@pytest.mark.promise("rabbitmq-never-before-eta")
def test_the_demo_on_rabbitmq_too(rabbitmq_url: str) -> None:
    """``BROKER_URL=amqp://... python -m example_project.demo``: the queue on RabbitMQ,
    delayed tasks in the demo's Redis."""
    result = run_demo(rabbitmq_url)
    assert "broker: amqp://" in result.stdout
    check(result)


def check(result: subprocess.CompletedProcess[str]) -> None:
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, output

    lateness_ms = {
        match["task"]: float(match["late"])
        for match in map(ROW.match, result.stdout.splitlines())
        if match
    }
    assert set(lateness_ms) == EXPECTED_RUNS, output
    early = {task: late for task, late in lateness_ms.items() if late < 0}
    assert not early, f"ran before their ETA (ms): {early}\n{output}"
    never_ran = rf"^cancelled task '{re.escape(CANCELLED)}': .* never ran"
    assert re.search(never_ran, result.stdout, re.MULTILINE), output
