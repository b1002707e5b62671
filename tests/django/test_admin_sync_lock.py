"""The sync lock of the admin's scheduler (contrib/django_celery_beat/sync.py): a beat whose
lock expired mid-sync (stalled while another beat synced newer rows) writes nothing more.
Real Redis and the site's database; the other beat's lock is a key of another token, as
redis-py's lock sets it."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from redis.exceptions import LockNotOwnedError

from celery_delayq import periodic
from celery_delayq.contrib.django_celery_beat.sync import LOCK_SECONDS, AdminSync, _Run
from celery_delayq.periodic.sending import store_of
from celery_delayq.periodic.writer import OccurrenceWriter

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: A task every app knows (Celery's own): importing one of the site's would bind it to the
#: site's app for the other tests of this process.
TASK = "celery.accumulate"


def row(name: str) -> PeriodicTask:
    every = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(name=name, task=TASK, interval=every)


def test_a_sync_that_lost_its_lock_mid_sync_writes_and_removes_nothing_more(site_app) -> None:
    sync = AdminSync(site_app, OccurrenceWriter(site_app))
    now = datetime.now(timezone.utc)
    with site_app.producer_or_acquire() as producer:
        store = store_of(producer)
        old = row("old")
        assert sync.apply(store, producer, now) is not None
        assert periodic.get(site_app, "old") is not None
        old.delete()
        rows = [row("new")]
        key = f"{store.keys.periodic_entries}:django-sync"
        lock = store.client.lock(key, timeout=LOCK_SECONDS, blocking=False, thread_local=False)
        assert lock.acquire()
        store.client.set(key, "another beat's token", px=int(LOCK_SECONDS * 1000))  # ours expired
        with pytest.raises(LockNotOwnedError):
            _Run(sync, store, producer, now, lock).over(rows)
        assert periodic.get(site_app, "new") is None  # not written from rows it read stale
        assert periodic.get(site_app, "old") is not None  # nor removed
        assert store.client.get(key) == b"another beat's token"  # the other's lock stays
        assert sync.apply(store, producer, now) is None  # held by the other: tried again later
        store.client.delete(key)
        assert sync.apply(store, producer, now) is not None
    assert periodic.get(site_app, "new") is not None
    assert periodic.get(site_app, "old") is None
