"""The hand-over to a Redis broker's queue lists, with the schedule in another Redis
(``delayq_store_url``): a mover killed at any step of claim -> publish -> ack loses
nothing, and only a kill between the push and the ack gives a second copy, with the same
task id and stable id (the promise of docs/explanation/guarantees.md's table)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.common.message import STABLE_ID_HEADER

from ...helpers import killed_mid_handover

pytestmark = pytest.mark.integration


@pytest.mark.promise("handover-kill-loses-nothing")
@pytest.mark.parametrize("killed_after", ["claim", "publish", "ack"])
def test_a_mover_killed_at_any_step_of_a_hand_over_to_redis_lists_loses_nothing(
    make_app: Callable[..., Celery],
    store_server,
    store_client: redis.Redis,
    redis_client: redis.Redis,
    killed_after: str,
) -> None:
    """The state a SIGKILL leaves at each step, then another mover's pass once the dead
    mover's lease is over."""
    app = make_app(delayq_store_url=store_server.url)
    queue_name = app.conf.task_default_queue
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    for result in sent:
        assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1
    killed_mid_handover(app, queue_name, killed_after, count=3)

    arrived = [json.loads(raw)["headers"] for raw in redis_client.lrange(queue_name, 0, -1)]
    copies = Counter(headers["id"] for headers in arrived)
    assert set(copies) == {r.id for r in sent}  # nothing lost
    assert set(copies.values()) == {2 if killed_after == "publish" else 1}
    stable = {headers["id"]: set() for headers in arrived}
    for headers in arrived:
        stable[headers["id"]].add(headers[STABLE_ID_HEADER])
    assert all(len(ids) == 1 for ids in stable.values())  # copies share their stable id
    assert store_client.keys("*inflight*") == [] and store_client.keys("*dead*") == []
    assert celery_delayq.backlog(app)[0].pending == 0
