"""Rescue: ETA messages sent the vanilla way move from kombu's lists and ``unacked`` hash
into the delayed store, once, and then run exactly once after their ETA."""

from __future__ import annotations

import json
import time
from datetime import timezone

import pytest

from celery_delayq.brokers.common.message import due_ms, eta_timestamp
from celery_delayq.brokers.connect import open_store
from celery_delayq.ops.rescue import Outcome, UnreadableMessage, open_rescuer, rescue

from ..helpers import invoke, remember
from ..vanilla import PRIORITY_LIST, apps, in_store, past

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def due_of(payload: bytes) -> int:
    return due_ms(eta_timestamp(json.loads(payload)["headers"]["eta"], timezone.utc))


def fetch_like_a_worker(client, prefix: str = "", queue: str = "default") -> bytes:
    """Take the oldest message as a vanilla worker does (BRPOP, then kombu's QoS.append
    records it in ``unacked``); returns its delivery tag."""
    message = json.loads(client.rpop(prefix + queue))
    tag = message["properties"]["delivery_tag"]
    info = message["properties"]["delivery_info"]
    entry = json.dumps([message, info["exchange"], info["routing_key"]])
    client.zadd(prefix + "unacked_index", {tag: time.time()})
    client.hset(prefix + "unacked", tag, entry)
    return tag.encode()


@pytest.mark.parametrize("prefix", ["", "pfx:"])
def test_future_eta_messages_move_from_the_lists_and_others_stay(make_app, redis_client, prefix):
    vanilla, app = apps(make_app, prefix)
    later = remember(vanilla, "later", countdown=60)
    urgent = remember(vanilla, "urgent", countdown=60, priority=5)
    remember(vanilla, "now")
    remember(vanilla, "past", eta=past())
    before = {
        name: redis_client.lrange(prefix + name, 0, -1) for name in ("default", PRIORITY_LIST)
    }

    report = rescue(app)

    assert (report.examined, report.rescued_from_lists, report.skipped_not_delayed) == (4, 2, 2)
    assert (report.rescued_from_unacked, report.skipped_gone, report.errors) == (0, 0, 0)
    kept = [raw for raw in before["default"] if later.id.encode() not in raw]
    assert redis_client.lrange(prefix + "default", 0, -1) == kept  # untouched, in order
    assert len(kept) == 2
    assert redis_client.llen(prefix + PRIORITY_LIST) == 0
    moved = in_store(app)
    assert set(moved) == {later.id, urgent.id}
    [later_raw] = [raw for raw in before["default"] if later.id.encode() in raw]
    assert moved[later.id] == ("default", prefix + "default", due_of(later_raw), later_raw)
    [urgent_raw] = before[PRIORITY_LIST]
    assert moved[urgent.id] == ("default", prefix + PRIORITY_LIST, due_of(urgent_raw), urgent_raw)


def test_small_windows_rescue_every_candidate_and_keep_the_order_of_the_rest(
    make_app, redis_client
):
    vanilla, app = apps(make_app)
    sent = [remember(vanilla, str(i), countdown=60 if i % 2 else None) for i in range(11)]
    rest = [raw for raw in redis_client.lrange("default", 0, -1) if b'"eta": null' in raw]
    seen = []

    report = rescue(app, batch=3, progress=seen.append)

    assert (report.examined, report.rescued_from_lists, report.skipped_not_delayed) == (11, 5, 6)
    assert set(in_store(app)) == {s.id for i, s in enumerate(sent) if i % 2}
    assert redis_client.lrange("default", 0, -1) == rest
    assert len(rest) == 6
    assert seen[-1].examined == 11 and seen[-1].rescued == 5 and seen[-1].skipped == 6
    assert [p.examined for p in seen] == sorted(p.examined for p in seen)


def test_the_index_is_only_a_hint_and_identical_copies_are_one_message(make_app, redis_client):
    vanilla, app = apps(make_app)
    sent = [remember(vanilla, str(i), countdown=60) for i in range(3)]
    newest, middle, oldest = redis_client.lrange("default", 0, -1)
    redis_client.rpush("default", middle)  # a second copy of the same message, at the tail

    with open_rescuer(app) as rescuer:
        assert rescuer.rescue_list_message("default", "default", oldest, 0) is Outcome.RESCUED
        assert rescuer.rescue_list_message("default", "default", newest, 99) is Outcome.RESCUED
        assert rescuer.rescue_list_message("default", "default", middle, 1) is Outcome.RESCUED
        assert rescuer.rescue_list_message("default", "default", middle, 0) is Outcome.RESCUED
        assert rescuer.rescue_list_message("default", "default", middle, 0) is Outcome.GONE

    assert redis_client.llen("default") == 0
    assert set(in_store(app)) == {s.id for s in sent}


def test_rescuing_twice_changes_nothing(make_app, redis_client):
    vanilla, app = apps(make_app)
    remember(vanilla, "later", countdown=60)
    fetched = remember(vanilla, "fetched", countdown=60)
    fetch_like_a_worker(redis_client)  # the oldest: "later" was sent first
    first = rescue(app)
    with open_store(app) as store:
        stats = store.stats("default")
    pending = in_store(app)

    second = rescue(app)

    assert (first.rescued_from_lists, first.rescued_from_unacked) == (1, 1)
    assert (second.examined, second.rescued) == (0, 0)
    assert in_store(app) == pending and fetched.id in pending
    with open_store(app) as store:
        assert store.stats("default") == stats == {"scheduled": 2}


def test_a_message_taken_between_scan_and_move_is_skipped(make_app, redis_client):
    vanilla, app = apps(make_app)
    remember(vanilla, "fetched", countdown=60)
    tag = fetch_like_a_worker(redis_client)
    entry = redis_client.hget("unacked", tag)
    redelivered = json.loads(entry)
    redelivered[0]["headers"]["redelivered"] = True
    remember(vanilla, "taken", countdown=60)
    [raw] = redis_client.lrange("default", 0, -1)

    with open_rescuer(app) as rescuer:
        redis_client.lrem("default", 1, raw)  # a worker popped it after the scan saw it
        assert rescuer.rescue_list_message("default", "default", raw) is Outcome.GONE
        redis_client.hdel("unacked", tag)  # the worker acknowledged it
        assert rescuer.rescue_unacked_entry(tag, entry) is Outcome.GONE
        # Restored by kombu and fetched again by a live worker: same tag, new value.
        redis_client.hset("unacked", tag, json.dumps(redelivered))
        assert rescuer.rescue_unacked_entry(tag, entry) is Outcome.GONE

    assert in_store(app) == {}
    assert redis_client.hexists("unacked", tag)  # the changed entry is left as it is


def test_unreadable_messages_are_left_alone_and_counted(make_app, redis_client):
    vanilla, app = apps(make_app)
    remember(vanilla, "bad eta", countdown=60)
    [raw] = redis_client.lrange("default", 0, -1)
    bad_eta = raw.replace(b'"eta": "', b'"eta": "not a time ')
    redis_client.delete("default")
    redis_client.lpush("default", b"not json", bad_eta)
    redis_client.hset("unacked", "tag-1", b"[1, 2]")

    report = rescue(app)

    assert (report.examined, report.errors, report.rescued) == (3, 3, 0)
    assert redis_client.lrange("default", 0, -1) == [bad_eta, b"not json"]
    assert redis_client.hget("unacked", "tag-1") == b"[1, 2]"
    assert len(report.error_samples) == 3
    assert any("invalid eta" in sample for sample in report.error_samples)


def test_bound_queues_follow_kombu_bindings(make_app):
    vanilla, app = apps(make_app)
    remember(vanilla, "declares the binding")
    with open_rescuer(app) as rescuer:
        assert rescuer.bound_queues("default", "default") == ["default"]
        assert rescuer.bound_queues("", "some-queue") == ["some-queue"]
        rescuer.exchange_types["broadcast"] = "fanout"
        assert rescuer.bound_queues("broadcast", "") is None
        with pytest.raises(UnreadableMessage, match="no queue bound"):
            rescuer.bound_queues("default", "no-such-key")


def test_cli_asks_first_and_without_an_answer_moves_nothing(make_app, redis_client):
    vanilla, app = apps(make_app)
    remember(vanilla, "later", countdown=60)

    result = invoke(app, "rescue")

    assert result.exit_code == 1  # click.Abort
    assert "warning: an entry in 'unacked'" in result.stderr
    assert "Found 1 message(s) with a future ETA: 1 in queue lists, 0 in unacked" in result.stderr
    assert "Move them into the delayed store? [y/N]" in result.stderr
    assert redis_client.llen("default") == 1
    assert in_store(app) == {}


def test_cli_moves_after_yes_and_prints_a_summary(make_app, redis_client):
    vanilla, app = apps(make_app)
    later = remember(vanilla, "later", countdown=60)
    remember(vanilla, "now")

    result = invoke(app, "rescue", input="y\n")

    assert result.exit_code == 0, result.output
    # Not necessarily the first line: click 8.1's test runner echoes the answer to stdout.
    assert "Rescued 1 message(s): 1 from queue lists, 0 from unacked." in (
        result.stdout.splitlines()
    )
    assert set(in_store(app)) == {later.id}


def test_cli_yes_json(make_app, redis_client):
    vanilla, app = apps(make_app)
    later = remember(vanilla, "later", countdown=60)
    remember(vanilla, "fetched", countdown=60)
    remember(vanilla, "now")
    fetch_like_a_worker(redis_client)

    result = invoke(app, "rescue", "--yes", "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == {
        "examined": 3,
        "rescued_from_lists": 1,
        "rescued_from_unacked": 1,
        "skipped_not_delayed": 1,
        "skipped_gone": 0,
        "errors": 0,
        "error_samples": [],
        "queues": ["default"],
        "include_unacked": True,
        "dry_run": False,
        "rescued": 2,
        "skipped": 1,
        "candidates": 2,
    }
    assert later.id in in_store(app)


def test_cli_no_unacked_and_queue_options(make_app, redis_client):
    vanilla, app = apps(make_app)
    remember(vanilla, "fetched", countdown=60)
    tag = fetch_like_a_worker(redis_client)
    mine = remember(vanilla, "mine", countdown=60)
    remember(vanilla, "other queue", countdown=60, queue="other")

    result = invoke(app, "rescue", "-Q", "default", "--no-unacked", "--yes", "--json")

    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    assert json.loads(result.stdout)["rescued"] == 1
    assert set(in_store(app)) == {mine.id}
    assert redis_client.hexists("unacked", tag)
    assert redis_client.llen("other") == 1


def test_cli_with_nothing_to_rescue_does_not_ask(make_app):
    vanilla, app = apps(make_app)
    remember(vanilla, "now")

    result = invoke(app, "rescue", "--json")

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert (data["examined"], data["rescued"], data["candidates"]) == (1, 0, 0)


def test_cli_refuses_an_app_not_on_the_transport(make_app):
    vanilla, _ = apps(make_app)

    result = invoke(vanilla, "rescue", "--yes")

    assert result.exit_code == 1
    assert "celery_delayq.transport:Transport" in result.stderr
