"""The bucket reader (store/flow.py) against what Redis may hold: queue names full of
glob characters, crafted bucket names, specs, holds, counts and log entries, and more
buckets than one read step takes. It reads every one of them, and only its own queue's,
and none of it breaks what shows them (the CLI's table, its JSON)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from celery_delayq.brokers.connect import open_store
from celery_delayq.cli.flow_limits import limits_human
from celery_delayq.core.layout.gates import MOST_READ_CONCURRENCY
from celery_delayq.core.store.flow import READ_CHUNK, SCAN_COUNT
from celery_delayq.ops.buckets import bucket_json, read_limits, state_text

from ...helpers import publish_limited

pytestmark = pytest.mark.adversarial

TASK = "tests.send"


def test_queue_names_with_glob_characters_read_only_their_own_buckets(make_app: Any) -> None:
    """A bucket with nothing waiting is found by its queue shard's index: ``a*``'s
    buckets are not ``ab``'s, nor ``a[b]``'s ``ab``'s."""
    app = make_app(delayq_rate_limits={TASK: "1/m"})
    queues = {"a*": "star", "ab": "plain", "a[b]": "brackets", "a\\": "backslash", "a?": "what"}
    for queue, key in queues.items():
        publish_limited(app, TASK, 1, key=key, queue=queue)  # released at once: then idle
    with open_store(app) as store:
        store.move_all_due()
        for queue, key in queues.items():
            found = store.buckets(queue, 100)
            assert [(b.queue, b.key, b.waiting, b.released) for b in found] == [(queue, key, 0, 1)]


def test_crafted_state_and_log_read_as_harmless_values(make_app: Any) -> None:
    app = make_app()
    crafted = [
        b"t\x00\xff\xfe<script>alert(1)</script>\x1b[31m",
        b"\x00",  # no task name, an empty key
        b"t*?[",
        b"paused",
    ]
    long_rate = b"r" + b"9" * 5000 + b"/1"
    specs = [b"r0/0,zz,\xff,c99999999999999999999/1," + long_rate, b"\xff\xfe", b"", b"c"]
    holds = [b"9" * 5000, b"999999999999999999", b"-5", b"paused"]
    with open_store(app) as store:
        client = store.client
        for name, spec, hold in zip(crafted, specs, holds):
            client.hset(b"delayq:{default}:fc:s:" + name, mapping={"spec": spec, "hold": hold})
            client.hset(b"delayq:{default}:fc:s:" + name, "released", b"lots")
            client.rpush(b"delayq:{default}:fc:w:" + name, b"not-a-message")
            client.zadd(b"delayq:{default}:fc:r:" + name, {b"m": 1e300})
            client.zadd("delayq:{default}:fc:ready", {name: 1e30})
        client.sadd("delayq:queues", "default")
        now_us = store.server_time_ms() * 1000
        client.rpush(
            "delayq:{default}:fc:log",
            b"",
            b"x y",
            b"99999999999999999999999 t",
            b"%d " % now_us + crafted[0],
            b"%d" % now_us,
            b"\xff" * 100,
        )
        listing = read_limits(store, 10_000)
        found = {b.name: b for b in listing.shown}
    assert set(found) == set(crafted)
    assert all(b.waiting == 1 and b.running == 1 and b.released == 0 for b in found.values())
    first = found[crafted[0]]
    assert first.task == "t" and first.key is not None and "\\xff" in first.key
    assert first.limits is not None  # so many digits: a limit nothing reaches, as Lua reads it
    assert first.limits.concurrency == MOST_READ_CONCURRENCY
    assert first.in_window is not None and len(first.in_window) == len(first.limits.rates)
    assert found[b"\x00"].held_until == float("inf")  # a hold no date can hold: never
    assert (found[b"\x00"].task, found[b"\x00"].key) == ("", "")
    assert found[b"t*?["].held_until is None  # a hold past
    assert found[b"t*?["].limits is None  # no spec
    assert str(found[b"paused"].limits) == "none"  # "c" is no limit
    for bucket in found.values():
        state_text(bucket)
    shown = limits_human(listing)
    assert "\x1b" not in shown and "\\x1b[31m" in shown
    json.dumps([bucket_json(b) for b in found.values()])


def test_keys_of_another_type_read_as_absent(make_app: Any) -> None:
    app = make_app()
    with open_store(app) as store:
        bucket = b"t\x00wrong"
        store.client.set(b"delayq:{default}:fc:w:" + bucket, "not a list")
        store.client.set(b"delayq:{default}:fc:s:" + bucket, "not a hash")
        store.client.set(b"delayq:{default}:fc:r:" + bucket, "not a zset")
        store.client.zadd("delayq:{default}:fc:ready", {bucket: 0})
        (found,) = store.buckets("default", 100)
    assert (found.key, found.waiting, found.running, found.limits) == ("wrong", 0, 0, None)


def test_sets_of_another_type_read_as_empty(make_app: Any) -> None:
    """The ready set, the bucket index and the released counts, each written by hand as
    a string: no bucket, no count, and nothing raised to the page or the exporter."""
    app = make_app()
    with open_store(app) as store:
        for name in ("ready", "index", "released"):
            store.client.set(f"delayq:{{default}}:fc:{name}", "x")
        store.client.sadd("delayq:queues", "default")
        assert store.buckets("default", 100) == []
        assert store.task_flows() == []


def test_crafted_released_counts_read_as_harmless_numbers(make_app: Any) -> None:
    app = make_app()
    with open_store(app) as store:
        counts = {b"t\xff\x1b[31m": b"7", b"nan": b"nan", b"big": b"9" * 400, b"neg": b"-3"}
        store.client.hset("delayq:{default}:fc:released", mapping=counts)
        store.client.sadd("delayq:queues", "default")
        flows = {f.task: f.released for f in store.task_flows()}
    assert flows == {"t\\xff\x1b[31m": 7, "nan": 0, "big": 0, "neg": 0}


def test_more_buckets_than_one_step_reads_are_all_read(make_app: Any) -> None:
    app = make_app()
    many = 2 * max(READ_CHUNK, SCAN_COUNT) + 7
    with open_store(app) as store:
        with store.client.pipeline(transaction=False) as pipe:
            for i in range(many):
                for queue in ("default", "elsewhere"):
                    pipe.hset(f"delayq:{{{queue}}}:fc:s:{TASK}\x00k{i}", "spec", "c1/1000")
                    pipe.zadd(f"delayq:{{{queue}}}:fc:index", {f"{TASK}\x00k{i}": "+inf"})
            for i in range(0, many, 3):
                pipe.rpush(f"delayq:{{default}}:fc:w:{TASK}\x00k{i}", "m")
            pipe.execute()
        found = store.buckets("default")
    assert len(found) == many
    assert sum(b.waiting for b in found) == len(range(0, many, 3))
    assert {b.key for b in found} == {f"k{i}" for i in range(many)}
