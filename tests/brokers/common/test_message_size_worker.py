"""``delayq_max_message_size`` where a user sees it: a real worker's retry."""

from __future__ import annotations

import pytest

import celery_delayq
from celery_delayq.config.errors import MessageTooLarge

from ...helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

LIMIT = 8192
SETTINGS = {"delayq_max_message_size": LIMIT}


@pytest.mark.promise("max-message-size-retry")
def test_a_retry_whose_message_is_too_big_fails_loudly_and_stores_nothing(
    make_app, redis_server, redis_client
):
    """Celery turns the refused publish of ``self.retry`` into ``Reject`` (not requeued):
    the task is not run again, and the worker's log says why, with the size and the
    limit; nothing waits in the store, nothing is left in the queue."""
    app = make_app(**SETTINGS)
    with pytest.raises(MessageTooLarge):  # the publisher is refused as the worker will be
        app.send_task("tests.worker_app.retry_bigger", ("x" * 2 * LIMIT, 0), countdown=60)

    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo") as worker:
        sent = app.send_task("tests.worker_app.retry_bigger", ("small", 2 * LIMIT))
        worker.wait_for_output("delayq_max_message_size", timeout=30)
        worker.wait_for_output(f"({LIMIT:,} bytes)", timeout=5)

    assert f"[{sent.id}]" in worker.output and "MessageTooLarge" in worker.output
    assert [run["retries"] for run in runs(redis_client)] == [0]
    assert sum(each.pending for each in celery_delayq.backlog(app)) == 0
    assert redis_client.llen("default") == 0
