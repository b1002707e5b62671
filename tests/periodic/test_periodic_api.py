"""Managing periodic entries at run time (celery_delayq.periodic), against a real Redis
and the app's real channel: each change is written whole or not at all, and takes effect
from the next occurrence."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import redis
from celery import Celery
from celery.schedules import crontab
from kombu.exceptions import OperationalError

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.periodic.records import OCCURRENCE_HEADER
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.periodic.writer import OccurrenceWriter
from celery_delayq.testing import RedisServer

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import pending_runs

pytestmark = pytest.mark.integration

NOW = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def pending_occurrences(app) -> list[str]:
    with open_store(app) as store:
        listed = store.pending(queue="default", limit=1_000)
    return sorted(json.loads(m.record.payload)["headers"][OCCURRENCE_HEADER] for m in listed)


def test_an_entry_is_added_listed_and_replaced_from_its_next_occurrence(app) -> None:
    added = periodic.upsert(app, "tick", TASK, 60, args=("a",), now=NOW)
    assert not added.replaced
    info = periodic.get(app, "tick", now=NOW)
    assert info is not None and info.entry.args == ("a",)
    assert info.next_runs == [NOW + timedelta(minutes=n) for n in (1, 2, 3)]
    assert len(pending_occurrences(app)) == 5  # the 5-minute horizon

    changed = periodic.upsert(app, "tick", TASK, 120, now=NOW + timedelta(seconds=1))
    assert changed.replaced and changed.version > added.version
    assert len(pending_occurrences(app)) == 2  # every 2 minutes from its change: +2 and +4
    assert [each.entry.name for each in periodic.entries(app, now=NOW)] == ["tick"]


def test_bad_input_writes_nothing_and_an_unknown_task_warns(app) -> None:
    with pytest.raises(ValueError, match="time zone"):
        periodic.upsert(app, "x", TASK, 60, timezone="Nowhere/Town", now=NOW)
    with pytest.raises(ValueError, match="catch_up"):
        periodic.upsert(app, "x", TASK, 60, catch_up="sometimes", now=NOW)
    assert periodic.entries(app) == [] and pending_occurrences(app) == []
    with pytest.warns(periodic.UnknownTaskWarning, match="no.such.task"):
        periodic.upsert(app, "x", "no.such.task", crontab(minute=0), now=NOW)
    assert periodic.get(app, "x") is not None


def test_pause_resume_and_remove_take_effect_from_the_next_occurrence(app) -> None:
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    periodic.pause(app, "tick", now=NOW + timedelta(seconds=1))
    assert pending_occurrences(app) == []
    assert periodic.get(app, "tick").next_runs == []
    periodic.resume(app, "tick", now=NOW + timedelta(seconds=2))
    assert len(pending_occurrences(app)) == 5
    assert periodic.remove(app, "tick", now=NOW + timedelta(seconds=3))
    assert pending_occurrences(app) == [] and periodic.get(app, "tick") is None
    assert not periodic.remove(app, "tick")
    with pytest.raises(KeyError, match="tick"):
        periodic.pause(app, "tick")


def test_run_now_sends_one_extra_occurrence_at_once(app, redis_client) -> None:
    periodic.upsert(app, "tick", TASK, 60, kwargs={"label": "now"}, now=NOW)
    task_id = periodic.run_now(app, "tick", now=NOW)
    queued = [json.loads(raw) for raw in redis_client.lrange("default", 0, -1)]
    assert [m["headers"]["id"] for m in queued] == [task_id]
    assert queued[0]["headers"][OCCURRENCE_HEADER] == NOW.isoformat()
    assert len(pending_occurrences(app)) == 5  # the schedule is as it was


def test_an_upsert_during_a_redis_outage_fails_clearly_and_leaves_the_old_entry_whole(
    app_factory,
) -> None:
    """The entry is one HSET of its whole definition: an upsert that cannot reach Redis
    raises, and the entry read after the outage is the old one, whole, still running."""
    with RedisServer(appendonly=True) as server:
        app = app_factory(server.url)
        with pytest.warns(periodic.UnknownTaskWarning):
            periodic.upsert(app, "heartbeat", TASK, 60.0, args=("old",))
        before = periodic.get(app, "heartbeat")
        server.stop()
        with pytest.raises((OperationalError, redis.ConnectionError)):  # before any write
            periodic.upsert(app, "heartbeat", TASK, 5.0, args=("new",))
        server.start()
        after = periodic.get(app, "heartbeat")
        assert after == before
        assert after is not None and after.entry.args == ("old",)
        assert len(pending_occurrences(app)) >= 1  # its occurrences written ahead are there


def test_a_pass_reuses_the_entries_it_read_unless_they_changed(app) -> None:
    """Beat reads every entry every pass: those whose stored bytes are unchanged are not
    parsed again; a changed or removed one is."""
    for name in ("a", "b"):
        periodic.upsert(app, name, TASK, 60.0, now=NOW)
    parsed: dict = {}
    with open_store(app) as store:
        registry = EntryRegistry(store.client, store.keys)
        first = {e.entry.name: e for e in registry.all(parsed)}
        periodic.upsert(app, "b", TASK, 30.0, now=NOW)
        periodic.remove(app, "a")
        periodic.upsert(app, "c", TASK, 60.0, now=NOW)
        second = {e.entry.name: e for e in registry.all(parsed)}
        again = {e.entry.name: e for e in registry.all(parsed)}
    assert sorted(second) == ["b", "c"]
    assert second["b"] is not first["b"] and second["b"].entry.schedule.seconds == 30
    assert all(again[name] is second[name] for name in second)
    assert len(parsed) == 2  # what was read last, no more


@pytest.mark.promise("periodic-next-runs-run")
def test_a_resume_just_before_an_occurrence_runs_it_as_get_says(app) -> None:
    """A per-minute entry resumed at :57 runs at the next :00, as ``get`` names it, not
    at the one after the settle window (nothing of a paused entry is pending)."""
    periodic.upsert(app, "minutely", TASK, crontab(minute="*"), timezone="UTC", now=NOW)
    periodic.pause(app, "minutely", now=NOW + timedelta(seconds=1))
    resumed_at = (NOW + timedelta(minutes=10)).replace(second=57)
    periodic.resume(app, "minutely", now=resumed_at)
    named = periodic.get(app, "minutely", now=resumed_at)
    assert named is not None
    first_written = min(when for when, _ in pending_runs(app) if when > resumed_at)
    assert named.next_runs[0] == first_written == resumed_at + timedelta(seconds=3)


@pytest.mark.promise("periodic-next-runs-run")
def test_after_an_upsert_get_names_the_new_versions_first_occurrence(app) -> None:
    """The occurrences due within the settle window stay as written (a mover may have
    moved them); ``get`` names the new version's, from where it starts."""
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v1",), now=NOW)
    changed_at = NOW + timedelta(seconds=10, milliseconds=500)
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v2",), now=changed_at)
    named = periodic.get(app, "heartbeat", now=changed_at)
    assert named is not None
    runs = [when for when, arg in pending_runs(app) if when > changed_at and arg == "v2"]
    assert named.next_runs == runs[:3]
    assert runs[0] > changed_at + OccurrenceWriter(app).settle
    listed = periodic.entries(app, now=changed_at)
    assert [info.next_runs for info in listed] == [named.next_runs]


@pytest.mark.promise("periodic-next-runs-run")
def test_a_resume_within_the_settle_window_of_a_pause_writes_each_occurrence_once(
    app,
) -> None:
    """Paused, those due within the settle window stay; resumed at once, the entry goes
    on right after them: none twice, none skipped, and ``get`` names the first new one."""
    periodic.upsert(app, "heartbeat", TASK, 1.0, args=("v1",), now=NOW)
    periodic.pause(app, "heartbeat", now=NOW + timedelta(seconds=1))
    periodic.resume(app, "heartbeat", now=NOW + timedelta(seconds=2))
    times = [when for when, _ in pending_runs(app)]
    assert times == [NOW + timedelta(seconds=n) for n in range(1, len(times) + 1)]
    named = periodic.get(app, "heartbeat", now=NOW + timedelta(seconds=2))
    assert named is not None
    kept = OccurrenceWriter(app).settle + timedelta(seconds=1)
    assert named.next_runs[0] == min(when for when in times if when > NOW + kept)


# --- the entry model: one-off, start and end, rules, description, runs counted ----------


@pytest.mark.promise("periodic-one-off-once")
def test_a_one_off_upserted_again_keeps_its_one_occurrence(app) -> None:
    """The same definition again (a deploy script run twice) keeps the entry's anchor, so
    its one occurrence is the same; turning one_off on starts it afresh from now."""
    periodic.upsert(app, "once", TASK, 60, one_off=True, description="first", now=NOW)
    first = periodic.get(app, "once", now=NOW)
    assert first is not None and first.next_runs == [NOW + timedelta(minutes=1)]
    later = NOW + timedelta(seconds=30)
    periodic.upsert(app, "once", TASK, 60, one_off=True, description="again", now=later)
    again = periodic.get(app, "once", now=later)
    assert again is not None and again.next_runs == [NOW + timedelta(minutes=1)]
    assert pending_occurrences(app) == [(NOW + timedelta(minutes=1)).isoformat()]
    periodic.upsert(app, "every", TASK, 60, now=NOW)
    periodic.upsert(app, "every", TASK, 60, one_off=True, now=later)
    turned = periodic.get(app, "every", now=later)
    assert turned is not None and turned.next_runs == [later + timedelta(minutes=1)]


@pytest.mark.promise("periodic-start-and-expires")
def test_an_entry_with_a_start_time_and_expires_lists_its_runs_between_them(app) -> None:
    start, end = NOW + timedelta(hours=1), NOW + timedelta(hours=1, minutes=2)
    periodic.upsert(app, "window", TASK, 60, start_time=start, expires=end, now=NOW)
    info = periodic.get(app, "window", now=NOW)
    assert info is not None and (info.entry.start_time, info.entry.expires) == (start, end)
    assert info.next_runs == [start, start + timedelta(minutes=1), end]
    assert pending_occurrences(app) == [start.isoformat()]  # at least the next one
    with pytest.raises(ValueError, match="or has ended"):
        periodic.upsert(app, "gone", TASK, 60, expires=NOW - timedelta(seconds=1), now=NOW)
    assert periodic.get(app, "gone") is None


@pytest.mark.promise("periodic-rrule")
def test_an_rrule_entry_lists_its_rules_times(app) -> None:
    rule = "DTSTART;TZID=Europe/Berlin:20300107T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO;COUNT=2"
    periodic.upsert(app, "mondays", TASK, rule, timezone="Europe/Berlin", now=NOW)
    info = periodic.get(app, "mondays", now=NOW)
    assert info is not None
    assert info.entry.schedule.rule == "FREQ=WEEKLY;COUNT=2;BYDAY=MO"
    when = datetime(2030, 1, 7, 8, tzinfo=timezone.utc)  # 09:00 CET
    assert info.next_runs == [when, when + timedelta(weeks=1)]
    until = "FREQ=DAILY;BYHOUR=9;BYMINUTE=0;BYSECOND=0;UNTIL=20300102T080000Z"
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    periodic.upsert(app, "daily", TASK, until, timezone="Europe/Berlin", start_time=start, now=NOW)
    days = periodic.get(app, "daily", now=NOW)
    assert days is not None and days.next_runs == [when.replace(day=d) for d in (1, 2)]


@pytest.mark.promise("periodic-description")
def test_a_description_is_kept_and_a_long_one_refused(app) -> None:
    told = "Sends the report.\nTo: ops"
    periodic.upsert(app, "told", TASK, 60, description=told, now=NOW)
    assert described(app, "told") == told
    with pytest.raises(ValueError, match="at most 1000 characters"):
        periodic.upsert(app, "told", TASK, 60, description="x" * 1001, now=NOW)
    assert described(app, "told") == told


def described(app, name: str) -> str:
    info = periodic.get(app, name)
    assert info is not None
    return info.entry.description


@pytest.mark.promise("periodic-old-entries-read-same")
def test_an_entry_stored_before_these_fields_reads_and_runs_as_before(app, redis_client) -> None:
    """A record as the earlier release wrote it: read with the defaults, written ahead, and
    stored again byte for byte when nothing changed."""
    anchor_ms = int(NOW.timestamp() * 1000)
    old = (
        f'{{"anchor_ms": {anchor_ms}, "args": [], "catch_up": "latest", "enabled": true, '
        f'"kwargs": {{}}, "name": "old", "options": {{}}, "origin": "api", '
        f'"schedule": {{"every": 60.0, "relative": false}}, "task": "{TASK}", '
        f'"timezone": "UTC"}}'
    )
    with open_store(app) as store:
        redis_client.hset(store.keys.periodic_entries, "old", f"7 {old}")
    info = periodic.get(app, "old", now=NOW)
    assert info is not None and info.version == 7 and info.entry.to_json() == old
    assert (info.entry.one_off, info.entry.start_time, info.entry.expires) == (False, None, None)
    assert info.entry.description == "" and info.history.total_run_count == 0
    assert info.next_runs == [NOW + timedelta(minutes=n) for n in (1, 2, 3)]
    periodic.pause(app, "old", now=NOW)
    with open_store(app) as store:
        stored = redis_client.hget(store.keys.periodic_entries, "old").decode()
    assert stored.partition(" ")[2] == old.replace('"enabled": true', '"enabled": false')


@pytest.mark.promise("periodic-total-run-count")
def test_runs_are_counted_once_per_occurrence_and_forgotten_with_the_entry(app) -> None:
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    first, second = NOW + timedelta(minutes=1), NOW + timedelta(minutes=2)
    with open_store(app) as store:
        history = EntryHistory(store.client, store.keys)
        assert history.ran("tick", first, first).runs == 1
        assert history.ran("tick", first, first + timedelta(seconds=5)).runs == 1  # a retry
        assert history.ran("tick", second, second).runs == 2
    info = periodic.get(app, "tick", now=NOW)
    assert info is not None and info.history.total_run_count == 2
    assert info.history.last_started == second
    periodic.remove(app, "tick")
    periodic.upsert(app, "tick", TASK, 60, now=NOW)
    again = periodic.get(app, "tick", now=NOW)
    assert again is not None and again.history.total_run_count == 0
