"""Changes racing in the registry (periodic/registry.py), interleaved by force on a real
Redis.

Two beats starting at once both sync ``beat_schedule`` (periodic/manage.py
``sync_settings``): the second must keep the entry the first wrote, anchor and version,
not replace it with its own anchor (which moved every later occurrence off the grid the
first beat had written ahead: the chaos run's 1-second entry shifted by the beats' start
gap). The other beat syncs whole while this one checks the entry, between its read of
the store and its write. And two changes whose versions are taken in one order and
stored in the other leave the newer version, which the marks in the queue follow."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.entry import from_ms, to_ms
from celery_delayq.periodic.manage import sync_settings
from celery_delayq.periodic.records import Mark
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.periodic.writer import OccurrenceWriter

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import pending_runs

pytestmark = pytest.mark.integration

SCHEDULE = {"tick": {"task": TASK, "schedule": 1.0}}


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def stored_entry(app: Celery) -> Any:
    with open_store(app) as store:
        found = EntryRegistry(store.client, store.keys).get("tick")
        versions = store.client.get(store.keys.periodic_versions)
    assert found is not None
    return found, int(versions)


def test_a_beat_syncing_beside_another_keeps_the_entry_the_other_wrote_meanwhile(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_start = datetime.now(timezone.utc)
    other_start = first_start + timedelta(milliseconds=68)
    check = OccurrenceWriter.check
    interleaved: list[bool] = []

    def check_while_another_beat_syncs(self: OccurrenceWriter, entry: Any, now: datetime) -> None:
        if not interleaved:  # this beat has read the store and found no entry
            interleaved.append(True)
            assert sync_settings(app, SCHEDULE, other_start).written == ["tick"]
        check(self, entry, now)

    monkeypatch.setattr(OccurrenceWriter, "check", check_while_another_beat_syncs)
    synced = sync_settings(app, SCHEDULE, first_start)

    assert interleaved
    assert synced.written == []  # the other beat's entry was found, and kept
    found, versions = stored_entry(app)
    assert found.entry.anchor == from_ms(to_ms(other_start))
    assert (found.version, versions) == (1, 1)


NOW = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)


def stored_and_marked(app: Celery) -> tuple[Any, Mark | None]:
    """The stored entry "tick" and its mark in its queue."""
    with open_store(app) as store:
        found = EntryRegistry(store.client, store.keys).get("tick")
        mark = Mark.parse(store.ahead_mark("default", "tick"))
    return found, mark


@pytest.mark.promise("periodic-versions-forward")
def test_of_two_changes_stored_in_the_other_order_the_newer_version_stays(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One change takes its version, another takes the next and is stored first: the
    first, landing last, must not put the older version back in the registry (the beats
    would hold it, and the marks, of the newer version, refuse it for good)."""
    take = EntryRegistry._version_above
    interleaved: list[bool] = []

    def version_then_another_change(self: EntryRegistry, floor: int) -> int:
        version = take(self, floor)
        if not interleaved:
            interleaved.append(True)
            periodic.upsert(app, "tick", TASK, 1.0, args=("v2",), now=NOW)
        return version

    monkeypatch.setattr(EntryRegistry, "_version_above", version_then_another_change)
    first = periodic.upsert(app, "tick", TASK, 1.0, args=("v1",), now=NOW)
    found, mark = stored_and_marked(app)
    assert interleaved and found.entry.args == ("v2",) and found.version > first.version
    assert mark is not None and mark.version == found.version
    assert {arg for _, arg in pending_runs(app)} == {"v2"}


def test_an_entry_stored_with_a_version_no_counter_gave_is_still_changed(
    app: Celery, redis_client
) -> None:
    """A version above the counter (an entry written by hand, the counter deleted) would
    refuse every change: the counter jumps past it."""
    periodic.upsert(app, "tick", TASK, 1.0, args=("v1",), now=NOW)
    with open_store(app) as store:
        raw = redis_client.hget(store.keys.periodic_entries, "tick")
        redis_client.hset(store.keys.periodic_entries, "tick", b"999 " + raw.partition(b" ")[2])
    changed = periodic.upsert(app, "tick", TASK, 1.0, args=("v2",), now=NOW)
    found, mark = stored_and_marked(app)
    assert changed.version > 999 and found.version == changed.version
    assert mark is not None and mark.version == changed.version
    settled = NOW + OccurrenceWriter(app).settle
    assert {arg for when, arg in pending_runs(app) if when > settled} == {"v2"}
    assert periodic.remove(app, "tick", now=NOW) and stored_and_marked(app)[0] is None
