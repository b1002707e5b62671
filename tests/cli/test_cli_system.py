"""``celery delayq`` with a standalone mover running as a process of its own."""

from __future__ import annotations

import json
import urllib.request

import pytest

from celery_delayq.periodic.audit.actors import os_user
from celery_delayq.testing import free_port, wait_until

from ..helpers import (
    PERIODIC_TASK,
    celery_process,
    invoke,
    remember,
    run_celery,
    standalone_mover,
)

pytestmark = pytest.mark.system


def test_status_lists_a_live_mover_with_its_host(app, redis_server, redis_client):
    with standalone_mover(redis_server.url) as mover:
        data = wait_until(lambda: json.loads(invoke(app, "status", "--json").output)["movers"])
        assert data[0]["name"] == "standalone mover" and data[0]["alive"] is True
        sent = remember(app, "moved by the standalone mover", countdown=3600)
        assert invoke(app, "show", sent.id).exit_code == 0  # pending
        assert invoke(app, "reschedule", sent.id, "--countdown", "0.2").exit_code == 0
        wait_until(lambda: invoke(app, "show", sent.id).exit_code == 1, timeout=10)
        (delivered,) = redis_client.lrange("default", 0, -1)
        assert json.loads(delivered)["headers"]["id"] == sent.id
        mover.terminate()  # SIGTERM: a clean stop
        mover.wait(timeout=20)

    assert mover.returncode == 0
    assert "standalone mover stopped" in mover.output
    # A clean stop removes the heartbeat.
    assert json.loads(invoke(app, "status", "--json").output)["movers"] == []


@pytest.mark.promise("services-listen-on-loopback", "web-loopback-unless-authenticated")
def test_the_web_command_serves_the_dashboard_until_sigterm(app, redis_server):
    sent = remember(app, "shown on the dashboard", countdown=3600)
    port = free_port()
    with celery_process(
        "delayq",
        redis_server.url,
        {},
        "web",
        "--port",
        str(port),
        ready="celery-delayq web: serving",
        log_level=None,
    ) as web:
        assert f"http://127.0.0.1:{port}/" in web.output
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/scheduled", timeout=10) as page:
            assert page.status == 200 and sent.id in page.read().decode()
        web.terminate()
        web.wait(timeout=20)
    assert web.returncode == 0 and "celery-delayq web: stopped" in web.output


@pytest.mark.promise("periodic-change-log")
def test_a_change_made_by_the_celery_command_is_in_its_history(redis_server):
    """``celery delayq periodic`` in a process of its own: its change is recorded as the
    OS user's, through the CLI, and ``history`` prints it."""
    add = ["delayq", "periodic", "add", "tick", "--task", PERIODIC_TASK, "--every", "60"]
    added = run_celery(redis_server.url, {}, *add)
    assert added.returncode == 0, added.stderr
    shown = run_celery(redis_server.url, {}, "delayq", "periodic", "history", "tick", "--json")
    assert shown.returncode == 0, shown.stderr
    (created,) = json.loads(shown.stdout)
    assert (created["action"], created["via"], created["who"]) == ("created", "cli", os_user())
