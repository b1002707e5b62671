"""Per-key flow control on a real Redis: one limit key's backlog, however long, does not
hold up another key's first message (it is released in the next move call); a bucket's
crafted state does not stop the release."""

from __future__ import annotations

import json

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.config.limits import LIMIT_KEY_HEADER, limits_of
from celery_delayq.config.settings import config_of
from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.core.store import Scheduled

pytestmark = pytest.mark.integration

TASK = "flow.keyed"
BACKLOG = 100_000


def test_a_keys_first_message_is_released_in_the_next_call_behind_another_keys_backlog(
    make_app, redis_client
) -> None:
    app = make_app(delayq_rate_limits={TASK: "1/s"}, delayq_move_call_budget=0)
    gate = limits_of(app, config_of(app)).gate_of({"task": TASK, LIMIT_KEY_HEADER: "big"})
    with open_store(app) as store:
        due = store.server_time_ms() - 1000
        store.schedule_many(
            Scheduled("default", f"m{i}", None, due, "default", b'{"n": %d}' % i, gate=gate)
            for i in range(BACKLOG)
        )
        store.move_all_due()  # every one enters the key's bucket; the first is released
        waiting = store.keys.for_queue("default").gate("w", bucket_of(TASK, "big"))
        backlog = redis_client.llen(waiting)
        assert backlog >= BACKLOG - 10  # one a second from the big key: the fill is quick
        assert redis_client.llen("default") == BACKLOG - backlog

        app.send_task(TASK, headers={LIMIT_KEY_HEADER: "other"})
        store.move_due("default")  # one call

    delivered = [json.loads(raw) for raw in redis_client.lrange("default", 0, -1)]
    keys = [message.get("headers", {}).get(LIMIT_KEY_HEADER) for message in delivered]
    assert keys.count("other") == 1
    assert redis_client.llen(waiting) >= backlog - 1  # the big key still at its own pace


def test_a_crafted_release_count_costs_only_the_count(make_app, redis_client) -> None:
    """A bucket's release count that is no integer (written by anything with access to
    Redis) starts again from 0: the move call does not fail on it."""
    app = make_app(delayq_rate_limits={TASK: "1/s"}, delayq_move_call_budget=0)
    with open_store(app) as store:
        state = store.keys.for_queue("default").gate("s", bucket_of(TASK, "k"))
        redis_client.hset(state, "released", "not a number")
        app.send_task(TASK, headers={LIMIT_KEY_HEADER: "k"})
        store.move_due("default")
    assert redis_client.llen("default") == 1
    assert redis_client.hget(state, "released") == b"1"


@pytest.mark.promise("flow-enters-at-publish")
def test_a_backlog_sent_without_countdown_holds_up_no_other_due_message(
    make_app, redis_client
) -> None:
    """Limited messages sent without a countdown enter their buckets as they are
    published: an unlimited message due after them goes in the very next move call of a
    small batch, not after the movers have taken the backlog from the schedule."""
    app = make_app(
        delayq_rate_limits={TASK: "1/s"}, delayq_move_call_budget=0, delayq_move_batch_size=100
    )
    with app.producer_or_acquire() as producer:
        for i in range(2_000):
            app.send_task(TASK, headers={LIMIT_KEY_HEADER: f"k{i}"}, producer=producer)
    with open_store(app) as store:
        shard = store.keys.for_queue("default")
        assert redis_client.zcard(shard.pages) == 0  # all in their buckets
        due = store.server_time_ms()
        store.schedule(Scheduled("default", "free", None, due, "default", b'{"free": 1}'))
        store.move_due("default")  # one call, of a batch of 100

    delivered = [json.loads(raw) for raw in redis_client.lrange("default", 0, -1)]
    assert [message for message in delivered if message.get("free") == 1]
