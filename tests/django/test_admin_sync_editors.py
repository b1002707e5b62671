"""Who the change log names for a change of django-celery-beat's rows
(contrib/django_celery_beat/editors.py), synced in this process against a real Redis and
the site's database: the admin user who saved the row, and only for that save."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from celery_delayq import periodic
from celery_delayq.contrib.django_celery_beat.sync import AdminSync
from celery_delayq.periodic.sending import store_of
from celery_delayq.periodic.writer import OccurrenceWriter

from .admin_forms import change, staff_client

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

#: A task every app knows (Celery's own), as in test_admin_sync_lock.py.
TASK = "celery.accumulate"


@pytest.mark.promise("periodic-change-log")
def test_a_schedule_changed_after_an_admin_save_is_not_that_users(site_app) -> None:
    """ada saves the row in the admin: her change. Its interval is then edited (not the
    row: its change time stays): that change is not ada's, whose save is recorded already."""
    sync = AdminSync(site_app, OccurrenceWriter(site_app))
    every = IntervalSchedule.objects.create(every=60, period=IntervalSchedule.SECONDS)
    row = PeriodicTask.objects.create(name="tick", task=TASK, interval=every)
    with site_app.producer_or_acquire() as producer:
        store = store_of(producer)
        assert sync.apply(store, producer, datetime.now(timezone.utc)) is not None
        longer = IntervalSchedule.objects.create(every=120, period=IntervalSchedule.SECONDS)
        change(staff_client("ada"), row.pk, interval=longer.pk)
        assert sync.apply(store, producer, datetime.now(timezone.utc)) is not None
        longer.every = 180
        longer.save()  # as its own admin page saves it
        assert sync.apply(store, producer, datetime.now(timezone.utc)) is not None
    third, second, first = periodic.changes(site_app, "tick")
    assert "180" in (third.changed["schedule"][1] or "")  # type: ignore[union-attr]
    assert (second.who, first.who) == ("ada", "admin")  # type: ignore[union-attr]
    assert third.who == "admin" and "no admin user known" in third.detail  # type: ignore[union-attr]
