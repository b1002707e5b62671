"""A SIGKILLed worker's acks_late task runs again on another worker while a worker that
died inside kombu's restore still holds its ``unacked_mutex`` (brokers/redis/restore.py)."""

from __future__ import annotations

import pytest

from celery_delayq.testing import wait_until, wait_until_quiescent

from ...helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

#: Taken messages come back 3 s after their worker last had them; workers look every 1 s.
SETTINGS = {
    "broker_transport_options": {
        "visibility_timeout": 3,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
}


@pytest.mark.slow
@pytest.mark.promise("dead-worker-tasks-run-elsewhere", "restore-without-lock", "ready-never-lost")
def test_a_killed_workers_task_runs_again_though_a_dead_worker_holds_the_lock(
    make_app, redis_server, redis_client
) -> None:
    app = make_app(**SETTINGS)
    redis_client.set("unacked_mutex", "a-dead-worker", ex=300)  # stock kombu: 300 s stalled
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo") as first:
        sent = app.send_task("tests.worker_app.hold", ("killed while running",))
        wait_until(lambda: runs(redis_client), timeout=30, what="the task started")
        first.kill()  # SIGKILL while the task runs: it stays in kombu's unacked hash
        first.wait(timeout=20)
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo"):
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=60, what="it ran again")
    killed, again = runs(redis_client)
    assert killed["id"] == again["id"] == sent.id
    assert (killed["redelivered"], again["redelivered"]) == (False, True)
    assert redis_client.hlen("unacked") == 0
    assert redis_client.get("unacked_mutex") == b"a-dead-worker"  # never needed


@pytest.mark.slow
@pytest.mark.parametrize("reliable", [True, False], ids=["leases", "kombu"])
@pytest.mark.promise("long-task-not-redelivered", "acks-late-reruns-only-on-death")
def test_a_task_longer_than_the_visibility_timeout_runs_once_on_a_live_worker(
    make_app, redis_server, redis_client, reliable: bool
) -> None:
    """An acks_late task of 8 s, visibility_timeout 3 s, a second worker beside it: kombu
    (``delayq_reliable_consume`` off) hands it to the other worker while the first still
    runs it; renewed leases keep it with the first.

    Both workers run their tasks in a pool child, so whichever takes it keeps renewing
    from its event loop (a solo pool runs the task in that loop, and renews only between
    tasks: with a solo worker taking it, the lease would rightly expire)."""
    settings = {**SETTINGS, "delayq_reliable_consume": reliable}
    app = make_app(**settings)
    prefork = ("-P", "prefork", "-c", "1")
    with (
        celery_process("worker", redis_server.url, settings, *prefork),
        celery_process("worker", redis_server.url, settings, *prefork, "-n", "second@%h"),
    ):
        sent = app.send_task("tests.worker_app.hold", ("long",), kwargs={"seconds": 8})
        wait_until(lambda: runs(redis_client), timeout=30, what="the task started")
        wait_until_quiescent(app, workers=2, timeout=60)
    started = [run["id"] for run in runs(redis_client)]
    assert set(started) == {sent.id}
    if reliable:
        assert len(started) == 1
    else:  # each copy outlives its 3 s on one worker while it runs 8 s on the other
        assert len(started) >= 2
