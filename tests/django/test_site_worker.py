"""The example Django site with a real ``celery worker`` and ``celery beat`` (its
scheduler: django-celery-beat's rows kept in the delayed store), both started from the
site's Django settings, on the tests' own Redis and the test database file in use."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client

from celery_delayq.testing import celery_command, wait_until
from example_project.django_site.shop.models import Order
from example_project.django_site.shop.tasks import CONFIRM_AFTER

from ..helpers import WatchedProcess, watched
from .conftest import SETTINGS_MODULE
from .test_site import pending

pytestmark = [pytest.mark.system, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@contextmanager
def site_process(
    redis_url: str, *args: str, ready: str, settings: str = SETTINGS_MODULE
) -> Iterator[WatchedProcess]:
    """``celery -A example_project.django_site <args>`` with the site's settings (or the
    settings module ``settings``), until the block ends."""
    env = dict(
        os.environ,
        DJANGO_SETTINGS_MODULE=settings,
        REDIS_URL=redis_url,
        # the test database in use: pytest-django names it apart per xdist worker
        DJANGO_SITE_DB=str(connection.settings_dict["NAME"]),
    )
    process = watched(
        celery_command("example_project.django_site", *args), f"celery {args[0]}", env
    )
    try:
        process.wait_for_output(ready, timeout=60)
        yield process
    finally:
        process.stop()


def confirmed(order_id: int) -> bool:
    return Order.objects.get(pk=order_id).confirmed_at is not None


def test_a_worker_runs_the_delayed_confirmation_and_beat_sends_periodic_tasks(
    site_app, redis_server
):
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    pen = Order.objects.create(item="pen")
    every_second = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.SECONDS)
    PeriodicTask.objects.create(
        name="confirm the pen",
        task="example_project.django_site.shop.tasks.confirm_order",
        interval=every_second,
        args=json.dumps([pen.pk]),
    )

    with site_process(
        redis_server.url, "worker", "-l", "info", "-c", "1", "--without-mingle", ready="ready."
    ) as worker:
        order = Client().post("/orders/", {"item": "book"}).json()["order"]
        assert pending(site_app) == 1, "the countdown waits in the store, not in a worker"
        try:
            wait_until(lambda: confirmed(order), timeout=60, abort=worker.exited)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the worker printed:\n{worker.output}") from exc
        assert pending(site_app) == 0  # before beat writes the periodic task's occurrences
        with site_process(redis_server.url, "beat", "-l", "info", ready="beat: Starting") as beat:
            assert "celery_delayq.contrib.django_celery_beat.scheduler.Scheduler" in beat.output
            wait_until(lambda: confirmed(pen.pk), timeout=30, abort=worker.exited)

    placed = Order.objects.get(pk=order)
    assert placed.confirmed_at - placed.placed_at >= timedelta(seconds=CONFIRM_AFTER)
