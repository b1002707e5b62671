"""``celery delayq`` with a standalone mover running as a process of its own."""

from __future__ import annotations

import json

from celery_delayq.testing import wait_until

from ..helpers import invoke, remember, standalone_mover


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
