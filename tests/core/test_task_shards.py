"""Where cancel, reschedule and show look for a task in a sharded store: its task id's
shard of each queue, and every shard of a queue that holds messages placed by another
key (keyed messages, periodic occurrences written ahead). Real redis-server."""

from __future__ import annotations

import pytest
import redis

from celery_delayq.core.layout.delay_keys import DelayKey
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.layout.record import key_index_field, task_key
from celery_delayq.core.store import DelayedStore, Scheduled

pytestmark = pytest.mark.integration

SHARDS = 8


def sharded_store(client: redis.Redis) -> DelayedStore:
    return DelayedStore(client, KeySpace(shards=SHARDS), 500)


def message(queue: str, task_id: str, due_ms: int) -> Scheduled:
    return Scheduled(queue, f"m-{task_id}", task_id, due_ms, queue, b"%s" % task_id.encode())


def script_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def test_a_cancel_asks_only_the_task_ids_shard_of_each_queue(redis_client):
    store = sharded_store(redis_client)
    later = store.server_time_ms() + 3_600_000
    for n in range(40):
        store.schedule(message(("a", "b")[n % 2], f"task-{n}", later))
    assert store.cancel("never-seen") == 0  # the script is loaded: no NOSCRIPT below
    redis_client.config_resetstat()

    assert store.cancel("task-7") == 1

    assert script_calls(redis_client) == 2  # one per queue, each in the task's shard
    assert store.pending_counts(["a", "b"]) == {"a": 20, "b": 19}
    assert [m.task_id for m in store.find("task-8")] == ["task-8"]


def a_task_id_outside(store: DelayedStore, queue: str, delay_key: bytes) -> str:
    """A task id whose shard of ``queue`` is not the delay key's."""
    home = store.keys.shard_of(queue, key_index_field(delay_key)).shard
    return next(
        task_id
        for task_id in (f"keyed-{n}" for n in range(100))
        if store.keys.shard_of(queue, task_key(task_id)).shard != home
    )


def test_a_keyed_message_outside_its_task_ids_shard_is_found_rescheduled_and_cancelled(
    redis_client,
):
    store = sharded_store(redis_client)
    now = store.server_time_ms()
    task_id = a_task_id_outside(store, "q", b"user:1")
    store.schedule_keyed(message("q", task_id, now + 3_600_000), DelayKey("user:1"))

    assert redis_client.smembers(store.keys.off_shard_queues) == {b"q"}
    assert [m.task_id for m in store.find(task_id)] == [task_id]
    assert store.reschedule(task_id, now + 60_000, lambda payload: payload) == 1
    assert store.cancel(task_id) == 1
    assert store.pending_counts(["q"]) == {"q": 0}


def test_a_store_written_before_the_off_shard_list_gets_its_queues_listed_by_a_movers_pass(
    redis_client,
):
    """Keyed messages stored by a version that did not list their queue: the first move
    pass of a process lists it, and cancel by task id finds them again."""
    store = sharded_store(redis_client)
    task_id = a_task_id_outside(store, "q", b"user:1")
    store.schedule_keyed(
        message("q", task_id, store.server_time_ms() + 3_600_000), DelayKey("user:1")
    )
    store.schedule(message("plain", "plain-1", store.server_time_ms() + 3_600_000))
    redis_client.delete(store.keys.off_shard_queues)  # as the earlier version left it
    assert store.cancel(task_id) == 0  # looked in the task id's shard only

    sharded_store(redis_client).move_all_due()

    assert redis_client.smembers(store.keys.off_shard_queues) == {b"q"}
    assert store.cancel(task_id) == 1
