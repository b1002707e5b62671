"""The quiescence check the exactly-once tests end with (``wait_until_quiescent``) sees every
place a task can still run from. Were it blind to one, those tests would count executions
too early and pass without checking anything."""

from __future__ import annotations

import socket

import pytest

from celery_delayq.testing import Activity, activity, wait_until

from ..helpers import celery_process, remember

pytestmark = pytest.mark.system


def test_activity_sees_delayed_queued_unacked_and_held_messages(make_app, redis_server):
    app = make_app()
    vanilla = make_app(broker_transport="redis")
    with celery_process("worker", redis_server.url, {}, "-P", "solo"):
        assert activity(app, workers=1).idle

        remember(app, "delayed", countdown=600)
        assert activity(app, workers=1).delayed == 1

        remember(app, "queued where nobody consumes", queue="nobody")
        assert activity(app, workers=1, queues=["default", "nobody"]).queued == 1

        # A vanilla publisher's ETA message goes to the worker at once, which holds it
        # until its ETA while kombu keeps it in `unacked`.
        remember(vanilla, "held by the worker", countdown=600)

        def holding() -> Activity | None:
            reading = activity(app, workers=1)
            return reading if reading.unacked and reading.held else None

        seen = wait_until(holding, what="the worker holds the message")
        # held: the vanilla message in the worker's timer, plus the delayed one, which
        # the worker's `inspect scheduled` reply lists from the store.
        assert (seen.unacked, seen.held) == (1, {"celery@" + socket.gethostname(): 2})
        assert not seen.idle
