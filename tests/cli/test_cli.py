"""``celery delayq ...`` against a real Redis and a real app."""

from __future__ import annotations

import json

import pytest

import celery_delayq
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.layout.record import Record, task_key
from celery_delayq.testing import RedisServer

from ..helpers import REMEMBER, invoke, remember, run_celery

pytestmark = pytest.mark.integration


def test_status_json_shape_and_timeline(app):
    remember(app, "soon", countdown=30)
    remember(app, "later", countdown=7200)
    remember(app, "other", countdown=120, queue="other")

    result = invoke(app, "status", "--json", "--timeline")

    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert set(data) == {
        "redis",
        "queues",
        "movers",
        "movers_alive",
        "overdue",
        "ok",
        "timeline",
        "periodic",
        "flow_control",
    }
    assert {q["queue"]: q["pending"] for q in data["queues"]} == {"default": 2, "other": 1}
    assert {(t["window"], t["due"]) for t in data["timeline"] if t["due"]} == {
        ("< 1 min", 1),
        ("1-5 min", 1),
        ("1-6 h", 1),
    }
    assert data["ok"] is True
    human = invoke(app, "status", "--timeline").output
    assert "falling due" in human and "no mover alive" in human


def test_status_warns_and_exits_1_when_overdue_and_no_mover_is_alive(app):
    # Stored for an hour, then made overdue: a short countdown could pass before the
    # publish reaches the transport, which would then queue the task at once.
    stranded = remember(app, "stranded", countdown=3600)
    assert celery_delayq.reschedule(app, stranded.id, countdown=-1) == 1

    result = invoke(app, "status")
    assert result.exit_code == 1
    assert "WARNING: 1 messages are overdue and no mover is alive" in result.output


def test_list_filters_and_orders(app):
    first = remember(app, "a", countdown=100)
    remember(app, "b", countdown=200, queue="other")
    last = remember(app, "c", countdown=300)
    app.send_task("tests.worker_app.retry_once", (1,), countdown=150)

    listed = json.loads(invoke(app, "list", "--json").output)
    assert [m["args"] for m in listed] == ["('a',)", "(1,)", "('b',)", "('c',)"]
    newest = json.loads(invoke(app, "list", "--json", "--newest-first", "--limit", "1").output)
    assert [m["id"] for m in newest] == [last.id]
    by_queue = json.loads(invoke(app, "list", "--json", "-Q", "other").output)
    assert [m["queue"] for m in by_queue] == ["other"]
    by_task = json.loads(invoke(app, "list", "--json", "--task", REMEMBER).output)
    assert len(by_task) == 3
    window = json.loads(invoke(app, "list", "--json", "--due-before", "120s").output)
    assert [m["id"] for m in window] == [first.id]
    assert "task id" in invoke(app, "list").output


def test_show_prints_name_args_queue_priority_eta_and_retries(app):
    sent = remember(app, "shown", countdown=60, priority=6)

    data = json.loads(invoke(app, "show", "--json", sent.id).output)

    assert len(data) == 1
    assert data[0]["task"] == REMEMBER and data[0]["args"] == "('shown',)"
    assert (data[0]["queue"], data[0]["priority"], data[0]["retries"]) == ("default", 6, 0)
    assert data[0]["eta"].startswith(data[0]["due"][:19])
    missing = invoke(app, "show", "no-such-task")
    assert missing.exit_code == 1 and "nothing pending" in missing.output


def test_cancel_reschedule_and_promote(app, redis_client):
    a, b, c = (remember(app, label, countdown=600) for label in "abc")

    cancelled = invoke(app, "cancel", "--json", a.id, "unknown")
    assert cancelled.exit_code == 1
    assert json.loads(cancelled.output) == {a.id: 1, "unknown": 0}

    assert invoke(app, "reschedule", b.id, "--countdown", "3600").exit_code == 0
    (moved,) = json.loads(invoke(app, "show", "--json", b.id).output)
    assert moved["due"] > json.loads(invoke(app, "show", "--json", c.id).output)[0]["due"]
    assert invoke(app, "reschedule", b.id).exit_code == 2  # neither --eta nor --countdown

    promoted = invoke(app, "promote", c.id)
    assert promoted.exit_code == 0, promoted.output
    (delivered,) = redis_client.lrange("default", 0, -1)
    assert json.loads(delivered)["headers"]["id"] == c.id


def test_promote_all_due_delivers_overdue_messages(app, redis_client):
    due = remember(app, "due", countdown=600)
    remember(app, "not yet", countdown=600)
    celery_delayq.reschedule(app, due.id, countdown=-1)  # overdue, without racing the clock
    assert json.loads(invoke(app, "status", "--json").output)["overdue"] == 1

    result = invoke(app, "promote", "--all-due", "--json")

    assert json.loads(result.output) == {"moved": 1}
    assert redis_client.llen("default") == 1


def test_purge_asks_for_confirmation_unless_yes(app):
    remember(app, "a", countdown=60)
    remember(app, "b", countdown=60, queue="other")

    refused = invoke(app, "purge", input="n\n")
    assert refused.exit_code == 1 and "Delete 2 pending delayed task(s)" in refused.output
    assert json.loads(invoke(app, "status", "--json").output)["queues"][0]["pending"] == 1

    only_other = invoke(app, "purge", "-Q", "other", "--yes", "--json")
    assert json.loads(only_other.output) == {"other": 1}
    everything = invoke(app, "purge", input="y\n")
    assert everything.exit_code == 0 and "purged 1" in everything.output


@pytest.mark.promise("persistence-warned")
def test_doctor_flags_eviction_and_missing_persistence(make_app):
    with RedisServer("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru") as server:
        app = make_app(url=server.url)
        overdue = remember(app, "overdue", countdown=600)
        celery_delayq.reschedule(app, overdue.id, countdown=-1)
        assert celery_delayq.backlog(app)[0].overdue == 1  # by the Redis clock

        result = invoke(app, "doctor", "--json")

    assert result.exit_code == 1
    findings = {f["check"]: f for f in json.loads(result.output)["findings"]}
    assert findings["eviction"]["level"] == "fail"
    assert "allkeys-lru" in findings["eviction"]["message"]
    assert findings["eviction"]["fix"] == "set maxmemory-policy noeviction"
    assert findings["persistence"]["level"] == "fail"
    assert findings["movers"]["level"] == "fail"
    assert findings["clock skew"]["level"] == "ok"


def test_doctor_passes_on_a_well_set_up_redis(make_app):
    with RedisServer("--appendfsync", "always", appendonly=True) as server:
        app = make_app(url=server.url)
        result = invoke(app, "doctor")
    assert result.exit_code == 0, result.output
    assert "[ok  ] persistence: AOF is on, appendfsync always" in result.output


@pytest.mark.promise("persistence-warned")
def test_doctor_warns_that_appendfsync_everysec_can_lose_the_last_second(make_app):
    with RedisServer("--appendfsync", "everysec", appendonly=True) as server:
        app = make_app(url=server.url)
        result = invoke(app, "doctor", "--json")
    findings = {f["check"]: f for f in json.loads(result.output)["findings"]}
    assert findings["persistence"]["level"] == "warn"
    assert "about the last second of writes" in findings["persistence"]["message"]
    assert findings["persistence"]["fix"].startswith("appendfsync always")


@pytest.mark.parametrize(
    ("aof", "level", "message"),
    [
        (
            False,
            "fail",
            "AOF is off and CONFIG GET save is not allowed: persistence cannot be confirmed, "
            "and without it a Redis restart loses every pending delayed task",
        ),
        (True, "ok", "AOF is on (appendfsync cannot be read here)"),
    ],
)
def test_doctor_reads_what_it_can_where_config_is_refused(make_app, aof, level, message):
    """Managed Redis often refuses CONFIG: the persistence check says so, not crash."""
    with RedisServer("--rename-command", "CONFIG", "", appendonly=aof) as server:
        app = make_app(url=server.url)
        result = invoke(app, "doctor", "--json")
    findings = {f["check"]: f for f in json.loads(result.output)["findings"]}
    assert (findings["persistence"]["level"], findings["persistence"]["message"]) == (
        level,
        message,
    )


def test_doctor_repair_fixes_an_inconsistent_store(app, redis_client):
    keep = remember(app, "kept", countdown=600)
    lost_schedule = remember(app, "record without schedule", countdown=900)
    keys = KeySpace().for_queue("default")
    page = keys.page(redis_client.zrange(keys.pages, 0, 0)[0])
    redis_client.zadd(page, {"ghost": 1})  # scheduled, no record
    redis_client.zrem(page, task_key(lost_schedule.id))  # record, no schedule entry
    redis_client.hset(keys.duplicates, task_key(keep.id), "7")  # lists a missing duplicate

    found = json.loads(invoke(app, "doctor", "--json").output)["findings"]
    (store_finding,) = [f for f in found if f["check"] == "store default"]
    assert "1 scheduled without a record" in store_finding["message"]
    assert "1 records without a schedule entry" in store_finding["message"]
    assert "1 duplicate listings out of date" in store_finding["message"]

    invoke(app, "doctor", "--repair")
    after = json.loads(invoke(app, "doctor", "--json").output)["findings"]
    assert [f["message"] for f in after if f["check"].startswith("store")] == [
        "records, schedule and duplicate listings agree"
    ]
    # The orphan is scheduled again at the due time in its record, not lost.
    (restored,) = json.loads(invoke(app, "show", "--json", lost_schedule.id).output)
    assert restored["eta"].startswith(restored["due"][:19])
    assert len(json.loads(invoke(app, "list", "--json").output)) == 2
    assert invoke(app, "show", keep.id).exit_code == 0


def test_the_delayq_command_is_registered_with_celery(redis_server, redis_client):
    result = run_celery(redis_server.url, None, "delayq", "status", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["redis"] == redis_server.url.replace("redis://", "redis://")


@pytest.mark.parametrize("raw", [b"not a record", Record(10**13, "default", b"{").encode("q")])
def test_list_survives_odd_records(app, redis_client, raw):
    remember(app, "fine", countdown=60)
    keys = KeySpace().for_queue("default")
    redis_client.hset(keys.messages, "odd", raw)
    redis_client.zadd(keys.page(redis_client.zrange(keys.pages, 0, 0)[0]), {"odd": 10**13})
    result = invoke(app, "list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    assert [m.get("args") for m in listed] == ["('fine',)", None]
    assert "unreadable message" in listed[1]["error"]
    assert invoke(app, "list").exit_code == 0
