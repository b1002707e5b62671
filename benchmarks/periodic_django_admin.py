"""One side's Django database of ``python -m benchmarks.periodic_beats --django``, the task
its rows run, and the admin that edits them.

Every worker and beat of a side imports this module (``CELERY_IMPORTS`` of
benchmarks/periodic_django_site.py): each run of ``tick`` appends one JSON record to the
side's Redis (``beat_chaos.RUNS_KEY``): the row it stands for (the ``periodic_task_name``
header both schedulers send), the version it ran with (its ``version`` keyword argument),
its occurrence (celery-delayq's header), when the beat sent it and when it started.

``python -m benchmarks.periodic_django_admin setup`` creates the tables
(django-celery-beat's migrations) and the two rows; ``... edit START END`` edits them every
``EDIT_EVERY`` seconds from ``START`` until ``END`` (epoch seconds) as the admin's change
form does, by saving the model: each edit sets the rows' ``version`` keyword argument to
the edit's number, and every other edit also switches the interval row between 2 and 3
seconds. Each save is recorded under ``EDITS_KEY`` once it returned.
"""

from __future__ import annotations

import json
import os
import sys
import time
from functools import cache
from typing import Any

import redis
from celery import shared_task, signals

from celery_delayq.periodic.records import OCCURRENCE_HEADER

from .beat_chaos import READY_KEY, RUNS_KEY, SENT_HEADER, sleep_until, stamp_sent

#: The Redis list of the edits saved (``{"row", "version", "every", "at"}``) and the hash of
#: what the scenario needs from the side's site (its settle window).
EDITS_KEY = "periodic:edits"
SITE_KEY = "periodic:site"
#: The two rows: an interval (2 s, then 3 s, then 2 s...) and a per-minute crontab in a
#: time zone, each with its interval in seconds at the start.
INTERVAL, CRONTAB = "interval", "crontab"
FIRST_EVERY = {INTERVAL: 2, CRONTAB: 60}
OTHER_INTERVAL = 3
CRONTAB_ZONE = "America/New_York"
EDIT_EVERY = 20.0


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["REDIS_URL"])


def tick(self: Any, version: int = 0) -> None:
    request = self.request
    record = {
        "entry": request.get("periodic_task_name"),
        "version": version,
        "at": time.time(),
        "occurrence": request.get(OCCURRENCE_HEADER),
        "sent": request.get(SENT_HEADER),
    }
    _client().rpush(RUNS_KEY, json.dumps(record))


TASK = "periodic.django.tick"
shared_task(bind=True, name=TASK)(tick)


def _announce_ready(**_: Any) -> None:
    _client().sadd(READY_KEY, os.getpid())


signals.before_task_publish.connect(stamp_sent, weak=False)
signals.worker_ready.connect(_announce_ready, weak=False)


def setup() -> None:
    """The tables and the two rows, version 0; the site's settle window for the scenario."""
    from django.core.management import call_command
    from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

    from celery_delayq.periodic.writer import OccurrenceWriter
    from example_project.django_site.celery import app

    call_command("migrate", verbosity=0)
    for seconds in (FIRST_EVERY[INTERVAL], OTHER_INTERVAL):
        IntervalSchedule.objects.create(every=seconds, period=IntervalSchedule.SECONDS)
    kwargs = json.dumps({"version": 0})
    PeriodicTask.objects.create(
        name=INTERVAL,
        task=TASK,
        interval=IntervalSchedule.objects.get(every=FIRST_EVERY[INTERVAL]),
        kwargs=kwargs,
    )
    crontab = CrontabSchedule.objects.create(minute="*", timezone=CRONTAB_ZONE)
    PeriodicTask.objects.create(name=CRONTAB, task=TASK, crontab=crontab, kwargs=kwargs)
    settle = OccurrenceWriter(app).settle.total_seconds()
    _client().hset(SITE_KEY, mapping={"settle": settle})


def edit(start: float, end: float) -> None:
    """Every ``EDIT_EVERY`` seconds from ``start`` (the first one after it) until ``end``."""
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    version = 1
    while start + version * EDIT_EVERY < end:
        sleep_until(start + version * EDIT_EVERY)
        for row in PeriodicTask.objects.filter(name__in=(INTERVAL, CRONTAB)).order_by("name"):
            row.kwargs = json.dumps({"version": version})
            if row.name == INTERVAL and version % 2:
                every = OTHER_INTERVAL if row.interval.every != OTHER_INTERVAL else 2
                row.interval = IntervalSchedule.objects.get(every=every)
            row.save()
            saved = {
                "row": row.name,
                "version": version,
                "every": row.interval.every if row.interval else FIRST_EVERY[CRONTAB],
                "at": time.time(),
            }
            _client().rpush(EDITS_KEY, json.dumps(saved))
        version += 1


def main(argv: list[str]) -> None:
    import django

    django.setup()
    if argv[0] == "setup":
        setup()
    else:
        edit(float(argv[1]), float(argv[2]))  # and the incarnation


if __name__ == "__main__":
    main(sys.argv[1:])
