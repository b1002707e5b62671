"""The change log of periodic entries (celery_delayq.periodic.audit), against a real Redis
and a real Redis Cluster: every change through the API is recorded with who, how and what,
in the same call; the log stays bounded; crafted records read as unreadable."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.audit import MAX_CHANGES, ChangeRecord, UnreadableRecord, acting
from celery_delayq.periodic.audit.actors import os_user
from celery_delayq.periodic.audit.changelog import MAX_CHANGED_FIELDS, MAX_RECORD_BYTES
from celery_delayq.periodic.manage import sync_settings
from celery_delayq.periodic.transfer.clear_all import clear

from ...helpers import PERIODIC_TASK as TASK

pytestmark = pytest.mark.integration

NOW = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def records(app: Celery, name: str) -> list[ChangeRecord]:
    found = periodic.changes(app, name)
    assert all(isinstance(each, ChangeRecord) for each in found), found
    return [each for each in found if isinstance(each, ChangeRecord)]


@pytest.mark.promise("periodic-change-log")
def test_each_api_change_is_recorded_with_who_how_and_what(app) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    periodic.upsert(app, "tick", TASK, 60, args=(1,), now=NOW, changed_by="alice")
    periodic.upsert(app, "tick", TASK, 120, args=(1,), now=NOW, changed_by="bob")
    periodic.pause(app, "tick", note="maintenance", now=NOW)
    periodic.resume(app, "tick", now=NOW, changed_by="carol")
    task_id = periodic.run_now(app, "tick", now=NOW)
    assert periodic.remove(app, "tick", now=NOW, changed_by="dave")
    log = records(app, "tick")  # kept after the removal, newest first
    assert [each.action for each in log] == [
        "removed", "ran now", "resumed", "paused", "updated", "created"
    ]  # fmt: skip
    assert [each.who for each in log] == ["dave", os_user(), "carol", os_user(), "bob", "alice"]
    assert {each.via for each in log} == {"api"}
    assert all(before <= each.at <= datetime.now(timezone.utc) for each in log)
    removed, ran, resumed, paused, updated, created = log
    assert list(updated.changed) == ["schedule"]
    old, new = updated.changed["schedule"]
    assert "60" in (old or "") and "120" in (new or "")
    assert paused.changed == {"enabled": ("true", "false"), "note": (None, '"maintenance"')}
    assert resumed.changed == {"enabled": ("false", "true"), "note": ('"maintenance"', None)}
    assert ran.detail == f"task {task_id}" and ran.changed == {}
    assert created.changed["args"] == (None, "[1]") and removed.changed["args"] == ("[1]", None)
    assert created.version is not None and updated.version > created.version


def test_a_write_that_changes_nothing_and_a_removal_of_nothing_are_not_recorded(app) -> None:
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    assert not periodic.remove(app, "ghost", now=NOW)
    assert [each.action for each in records(app, "tick")] == ["created"]
    for _ in range(2):  # paused twice, resumed twice: the second of each changes nothing
        periodic.pause(app, "tick", note="why", now=NOW)
    for _ in range(2):
        periodic.resume(app, "tick", now=NOW)
    assert [each.action for each in records(app, "tick")] == ["resumed", "paused", "created"]
    assert periodic.changes(app, "ghost") == []


@pytest.mark.promise("periodic-change-log-settings")
def test_beat_schedule_synced_again_and_again_is_recorded_once_per_real_change(app) -> None:
    spec = {"tick": {"task": TASK, "schedule": 60.0}}
    for _ in range(3):  # three beats start
        sync_settings(app, spec, NOW)
    sync_settings(app, {"tick": {"task": TASK, "schedule": 30.0}}, NOW)
    sync_settings(app, {"tick": {"task": TASK, "schedule": 30.0}}, NOW)
    sync_settings(app, {}, NOW)
    log = records(app, "tick")
    assert [each.action for each in log] == ["removed", "updated", "created"]
    assert {each.via for each in log} == {"settings"}


def test_acting_names_the_interface_and_changed_by_the_user(app) -> None:
    with acting(who="ops", via="cli"):
        periodic.upsert(app, "tick", TASK, 60, now=NOW)
        periodic.pause(app, "tick", now=NOW, changed_by="root")
    paused, created = records(app, "tick")
    assert (created.who, created.via, paused.who, paused.via) == ("ops", "cli", "root", "cli")


@pytest.mark.promise("periodic-change-log-bound")
def test_the_log_keeps_the_newest_changes_and_expires(app) -> None:
    periodic.upsert(app, "tick", TASK, 1, now=NOW)
    for seconds in range(2, MAX_CHANGES + 12):
        periodic.upsert(app, "tick", TASK, seconds, now=NOW)
    log = records(app, "tick")
    assert len(log) == MAX_CHANGES
    newest, oldest = log[0].changed["schedule"], log[-1].changed["schedule"]
    assert str(MAX_CHANGES + 11) in (newest[1] or "") and str(12) in (oldest[1] or "")
    assert len(periodic.changes(app, "tick", limit=5)) == 5
    with open_store(app) as store:
        key = store.keys.periodic_changes("tick")
        assert 0 < store.client.pttl(key) <= 90 * 86_400_000
        assert store.client.llen(key) == MAX_CHANGES  # the store keeps no more


def test_values_are_cut_short(app) -> None:
    periodic.upsert(app, "tick", TASK, 60, args=("x" * 5000,), now=NOW)
    (created,) = records(app, "tick")
    assert len(created.changed["args"][1] or "") == 120


@pytest.mark.promise("periodic-change-log-crafted")
@pytest.mark.parametrize(
    "crafted",
    [b"\xff\xfe", b"[" * 100_000, b"{}", b'{"at": 1e400}', b'{"at": 99999999999999999}',
     b'{"at": 1, "who": 1, "via": "x", "action": "y"}', b"x" * 20_000, b"null",
     b'{"at": 1, "who": "a", "via": "b", "action": "c", "changes": {"f": [1, 2]}}'],
)  # fmt: skip
def test_crafted_records_read_as_unreadable(app, crafted: bytes) -> None:
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    with open_store(app) as store:
        store.client.lpush(store.keys.periodic_changes("tick"), crafted)
    first, second = periodic.changes(app, "tick")
    assert isinstance(first, UnreadableRecord) and first.reason
    assert isinstance(second, ChangeRecord) and second.action == "created"


@pytest.mark.parametrize("prefix", ["", "app1:", "{app}:", "a}b:", "a{b:"])
def test_each_change_is_recorded_on_a_redis_cluster(make_app, cluster_store_url, prefix) -> None:
    """On the cluster, a change and its record share a slot (one call), or the record
    follows (a prefix with a brace outside a hash tag): never a CROSSSLOT refusal."""
    app = make_app(
        delayq_store_url=cluster_store_url,
        broker_transport_options={"global_keyprefix": prefix},
    )
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "tick", "some.task", 60, now=NOW, changed_by="alice")
    periodic.pause(app, "tick", now=NOW, changed_by="alice")
    assert [each.action for each in records(app, "tick")] == ["paused", "created"]


@pytest.mark.promise("periodic-change-log-bound")
def test_records_older_than_the_max_age_are_not_read(app) -> None:
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    day = 86_400_000
    with open_store(app) as store:
        key = store.keys.periodic_changes("tick")
        for age in (91, 89):  # the older first: the log is newest first
            record = {"at": now_ms - age * day, "who": f"{age}", "via": "api", "action": "updated"}
            store.client.lpush(key, json.dumps(record))
    assert [each.who for each in records(app, "tick")] == ["89"]


@pytest.mark.promise("periodic-change-log")
def test_removing_or_clearing_a_record_that_cannot_be_read_is_recorded(app) -> None:
    """A stored record that is no entry (bytes written by hand) has no fields to compare:
    its removal is still a change, and recorded."""
    with open_store(app) as store:
        store.client.hset(store.keys.periodic_entries, mapping={"junk": "7 <not json>", "x": "?"})
    assert periodic.remove(app, "junk", now=NOW, changed_by="alice")
    (removed,) = records(app, "junk")
    assert (removed.who, removed.action, removed.changed) == ("alice", "removed", {})
    assert "could not be read" in removed.detail
    with acting(action="cleared"):
        assert clear(app, NOW).unreadable == ["x"]
    assert [each.action for each in records(app, "x")] == ["cleared"]


def test_a_change_over_a_crafted_record_of_many_fields_is_recorded_readably(app) -> None:
    """The fields compared are those of what was stored, which may be anyone's bytes: the
    record of the change that replaces it stays short enough to be read."""
    crafted = {"name": "tick", **{f"{n:05}" + "k" * 1000: "v" * 1000 for n in range(300)}}
    with open_store(app) as store:
        store.client.hset(store.keys.periodic_entries, "tick", "1 " + json.dumps(crafted))
        periodic.upsert(app, "tick", TASK, 60, now=NOW, changed_by="alice")
        (raw,) = store.client.lrange(store.keys.periodic_changes("tick"), 0, -1)
    assert len(raw) < MAX_RECORD_BYTES
    (updated,) = records(app, "tick")
    assert (updated.who, updated.action) == ("alice", "updated")
    assert 0 < len(updated.changed) <= MAX_CHANGED_FIELDS + 1
    assert all(len(field) <= 120 for field in updated.changed)


@pytest.mark.promise("periodic-change-log-crafted")
@pytest.mark.parametrize("prefix", ["", "a{b:"])  # the log in the script call, or after it
def test_a_log_key_of_another_type_stops_no_change_and_no_reading(make_app, prefix) -> None:
    """A log key someone made a string: reading says so, and the next change goes through
    whole (its runs rewritten), its log made anew, not half-written with an error."""
    app = make_app(broker_transport_options={"global_keyprefix": prefix})
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "tick", "some.task", 60, now=NOW)
    with open_store(app) as store:
        store.client.set(store.keys.periodic_changes("tick"), "not a list")
    (read,) = periodic.changes(app, "tick")
    assert isinstance(read, UnreadableRecord) and "not a list" in read.reason
    periodic.pause(app, "tick", now=NOW, changed_by="alice")
    assert [(each.who, each.action) for each in records(app, "tick")] == [("alice", "paused")]
    with open_store(app) as store:
        assert store.pending() == []  # the paused entry's runs withdrawn: the change was whole
