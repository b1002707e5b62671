"""A crafted ``delayq_slot`` header (any value a message may carry) names no key outside
the queue's flow-control keys, and the slot scripts called on whatever it names, keys of
another type among them, change nothing and raise nothing (a worker runs such a task:
test_concurrency.py)."""

from __future__ import annotations

from typing import Any

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.worker.flow.running_slots import slot_of

pytestmark = pytest.mark.integration

CRAFTED: list[Any] = [
    None,
    "default",
    ["default"],
    ["default", "t", "x"],
    [1, "t"],
    ["default", {"a": 1}],
    ["", "t"],
    ["default", ""],
    ["default", "t" * 2000],  # longer than any bucket
    ["}:msg", "t"],
    ["default", "x}:msg"],
    ["default}:fc:r:t", "}"],
    ["\ud800", "\udfff"],
    [["nested"], "t"],
]


@pytest.mark.parametrize("value", CRAFTED)
def test_a_crafted_slot_header_names_no_key_outside_the_flow_control_keys(app, value) -> None:
    with open_store(app) as store:
        slot = slot_of(store.keys, value, "task-1")
    if slot is not None:
        for key in [*slot.keys, *slot.take_keys]:
            assert key.startswith("delayq:{"), key
            assert ":fc:" in key


def test_the_slot_scripts_on_keys_of_another_type_do_nothing(app, redis_client) -> None:
    """Every key a slot names made a string first (as a crafted name could hit another
    key): taking, renewing and giving back write nothing and raise nothing."""
    with open_store(app) as store:
        shard = store.keys.for_queue("default")
        keys, take_keys = shard.slot_keys("t"), shard.slot_take_keys("t")
        for key in {*keys, *take_keys}:
            redis_client.set(key, "not mine")
        take, end = store.scripts.slot_take, store.scripts.slot_end
        assert take(keys=take_keys, args=[b"m", "take", "t"]) == [0, 0]
        assert take(keys=take_keys, args=[b"m", "renew", "t"]) == [0, 0]
        assert end(keys=keys, args=[b"m", "t", store.keys.wakeup_channel]) == [0, 0]
    assert [redis_client.get(key) for key in {*keys, *take_keys}] == [b"not mine"] * 5
