"""Two beats starting at once both sync ``beat_schedule`` (periodic/manage.py
``sync_settings``): the second must keep the entry the first wrote, anchor and version,
not replace it with its own anchor (which moved every later occurrence off the grid the
first beat had written ahead: the chaos run's 1-second entry shifted by the beats' start
gap). The interleaving is forced, on a real Redis: the other beat syncs whole while this
one checks the entry, between its read of the store and its write."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.entry import from_ms, to_ms
from celery_delayq.periodic.manage import sync_settings
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.periodic.writer import OccurrenceWriter

from ..helpers import PERIODIC_TASK as TASK

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
