"""The example Django site with the settings the Django guide gives (celery-delayq's beat
scheduler, with the admin's rows and ``CELERY_BEAT_SCHEDULE``): with every beat stopped, a
countdown task and the occurrences already written ahead still run, as the periodic guide
promises."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from django.test import Client

from celery_delayq import periodic
from celery_delayq.testing import wait_until
from example_project.django_site.shop.models import Order

from .test_site_worker import site_process

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SWEEP = "example_project.django_site.shop.tasks.confirm_overdue_orders"


def last_run(app, entry: str) -> datetime | None:
    """The occurrence of ``entry`` that a worker last started."""
    found = periodic.get(app, entry)
    return None if found is None else found.history.last_occurrence


@pytest.mark.promise("django-beat-down-still-delivers")
def test_with_every_beat_stopped_a_countdown_and_the_occurrences_written_ahead_still_run(
    site_app, redis_server
):
    worker_args = ("worker", "-l", "info", "-c", "1", "--without-mingle")
    with site_process(redis_server.url, *worker_args, ready="ready.") as worker:
        with site_process(redis_server.url, "beat", "-l", "info", ready="beat: Starting"):
            wait_until(lambda: periodic.get(site_app, "confirm-overdue-orders") is not None)
            periodic.upsert(site_app, "every-second", SWEEP, 1.0)  # beat writes it ahead
            wait_until(lambda: last_run(site_app, "every-second") is not None, timeout=30)
        stopped = datetime.now(timezone.utc)

        order = Client().post("/orders/", {"item": "book"}).json()["order"]
        wait_until(
            lambda: Order.objects.get(pk=order).confirmed_at is not None,
            timeout=30,
            abort=worker.exited,
        )
        wait_until(
            lambda: (
                (last_run(site_app, "every-second") or stopped) > stopped + timedelta(seconds=2)
            ),
            timeout=30,
            abort=worker.exited,
        )
