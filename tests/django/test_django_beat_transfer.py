"""``celery delayq periodic import --django-settings``: django-celery-beat's rows (real
model rows in the site's SQLite test database) are imported with the times
django-celery-beat's ``DatabaseScheduler`` gives them, for a year; those an entry cannot
hold are skipped, with why; and the ``django-celery-beat`` export, loaded with
``loaddata``, gives rows with our times. Clocked, one-off, start_time and expires rows
included: each gives the same runs for a year both ways."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import celery
import pytest
from django.core.management import call_command
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from django_celery_beat.schedulers import ModelEntry
from django_celery_beat.tzcrontab import TzAwareCrontab

from celery_delayq import periodic
from celery_delayq.periodic.schedules.clocked import clocked

from ..helpers import invoke
from ..periodic.transfer.stepping import TO_THE_MS, YEAR, assert_same_times, celery_runs
from ..periodic.transfer.test_round_trips import definition
from .conftest import SETTINGS_MODULE

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

UTC = timezone.utc
#: Our times are Celery 5.7's: an older Celery steps an interval in wall-clock time and a
#: crontab otherwise across the clocks' changes, so a year of them differs by a run or two.
SAME_TIMES_AS_CELERY = pytest.mark.skipif(
    celery.VERSION < (5, 7), reason="our times are Celery 5.7's; this Celery's differ at DST"
)
NOW = datetime.now(UTC)
SWEEP = "example_project.django_site.shop.tasks.confirm_overdue_orders"
#: The rows an entry holds, and those it cannot (with a word of why).
IMPORTED = [
    "every-3h",
    "every-90m",
    "starts-later",
    "weekdays",
    "six-hourly",
    "monthly",
    "sunrise",
    "once",
    "ends",
    "cron-later",
    "started",
    "next-monthly-once",
]
#: The rows of one run (a one-off has one run in the year).
ONE_RUN = {"once", "next-monthly-once"}
SKIPPED = {"celery.backend_cleanup": "Celery's beat"}


def make_rows() -> None:
    """Rows of every kind, made as the admin makes them (``save``)."""
    every_3h = IntervalSchedule.objects.create(every=3, period=IntervalSchedule.HOURS)
    every_90m = IntervalSchedule.objects.create(every=90, period=IntervalSchedule.MINUTES)
    berlin = CrontabSchedule.objects.create(
        minute="30", hour="9", day_of_week="1-5", timezone=ZoneInfo("Europe/Berlin")
    )
    tokyo = CrontabSchedule.objects.create(minute="0", hour="*/6", timezone=ZoneInfo("Asia/Tokyo"))
    monthly = CrontabSchedule.objects.create(minute="0", hour="0", day_of_month="1")
    sunrise = SolarSchedule.objects.create(event="sunrise", latitude=52.52, longitude=13.405)
    at = ClockedSchedule.objects.create(clocked_time=NOW + timedelta(days=1))
    make = PeriodicTask.objects.create
    make(
        name="every-3h",
        task=SWEEP,
        interval=every_3h,
        last_run_at=NOW - timedelta(minutes=61),
        args='[1, "a"]',
        kwargs='{"k": true}',
        queue="default",
        priority=3,
        headers='{"h": "v"}',
        expire_seconds=60,
    )
    make(name="every-90m", task=SWEEP, interval=every_90m)  # never ran: from date_changed
    make(name="starts-later", task=SWEEP, interval=every_3h, start_time=NOW + timedelta(days=2))
    make(name="weekdays", task=SWEEP, crontab=berlin, description="the morning sweep")
    make(name="six-hourly", task=SWEEP, crontab=tokyo)
    make(name="monthly", task=SWEEP, crontab=monthly, enabled=False)
    make(name="sunrise", task=SWEEP, solar=sunrise)
    make(name="once", task=SWEEP, clocked=at, one_off=True)
    make(name="ends", task=SWEEP, interval=every_3h, expires=NOW + timedelta(days=30))
    make(name="cron-later", task=SWEEP, crontab=tokyo, start_time=NOW + timedelta(days=2))
    make(  # its start passed: it counts from its last run
        name="started",
        task=SWEEP,
        interval=every_90m,
        start_time=NOW - timedelta(days=10, minutes=7),
        last_run_at=NOW - timedelta(minutes=50),
    )
    make(name="next-monthly-once", task=SWEEP, crontab=monthly, one_off=True)
    make(name="celery.backend_cleanup", task="celery.backend_cleanup", crontab=monthly)


def their_runs(app: Any, name: str, after: datetime, until: datetime) -> list[datetime]:
    """The runs ``DatabaseScheduler`` makes of the row ``name`` in ``(after, until]``
    (``ModelEntry.is_due``): from its last run (``date_changed`` if none), in the
    crontab's zone; with a start time still to come, first at its ``due_start_time``
    (the start, or a crontab's next time from it; the last run is then set 30 years
    back); a clocked one at its time; none from its ``expires`` on (it is disabled
    then); a one-off's first only (then it is disabled)."""
    task = PeriodicTask.objects.get(name=name)
    entry = ModelEntry(task, app=app)
    zone = entry.schedule.tz if isinstance(entry.schedule, TzAwareCrontab) else ZoneInfo("UTC")
    if task.clocked is not None:
        runs = [task.clocked.clocked_time]
    elif task.start_time is not None and task.start_time > after:
        first = task.due_start_time(zone)
        runs = [first, *celery_runs(entry.schedule, first, zone, after, until)]
    else:
        runs = celery_runs(entry.schedule, entry.last_run_at, zone, after, until)
    if task.expires is not None:
        runs = [run for run in runs if run < task.expires]
    return runs[:1] if task.one_off else runs


def assert_rows_give_our_times(app: Any, names: list[str]) -> None:
    after, until = datetime.now(UTC), datetime.now(UTC) + YEAR
    for name in names:
        info = periodic.get(app, name)
        assert info is not None, name
        theirs = their_runs(app, name, after, until)
        assert_same_times(info.entry, theirs, after, until, 1 if name in ONE_RUN else 11)


@pytest.mark.promise("periodic-import-same-occurrences", "periodic-import-skipped-named")
@SAME_TIMES_AS_CELERY
def test_rows_are_imported_with_the_times_django_celery_beat_gives_them_for_a_year(
    site_app: Any,
) -> None:
    make_rows()
    done = invoke(site_app, "periodic", "import", "--django-settings", SETTINGS_MODULE, "--json")
    assert done.exit_code == 1, done.output  # some are skipped
    steps = {step["name"]: step for step in json.loads(done.stdout)}
    assert sorted(n for n, s in steps.items() if s["outcome"] == "added") == sorted(IMPORTED)
    for name, why in SKIPPED.items():
        assert steps[name]["outcome"] == "skipped" and why in steps[name]["reason"], name
    assert steps["weekdays"]["notes"] == []
    assert "started: its start_time" in steps["started"]["notes"][0]

    every_3h = periodic.get(site_app, "every-3h")
    assert every_3h is not None and every_3h.entry.args == (1, "a")
    assert dict(every_3h.entry.options) == {
        "queue": "default",
        "priority": 3,
        "headers": {"h": "v"},
        "expires": 60,
    }
    weekdays = periodic.get(site_app, "weekdays")
    assert weekdays is not None and weekdays.entry.timezone == "Europe/Berlin"
    monthly = periodic.get(site_app, "monthly")
    assert monthly is not None and not monthly.entry.enabled
    assert weekdays.entry.description == "the morning sweep"
    once, ends = periodic.get(site_app, "once"), periodic.get(site_app, "ends")
    assert once is not None and once.entry.one_off and isinstance(once.entry.schedule, clocked)
    end = PeriodicTask.objects.get(name="ends").expires
    assert ends is not None and ends.entry.expires is not None
    assert abs(ends.entry.expires - end) < TO_THE_MS  # the store keeps milliseconds
    cron_later = periodic.get(site_app, "cron-later")
    assert cron_later is not None and cron_later.entry.start_time is not None
    assert_rows_give_our_times(site_app, IMPORTED)

    again = invoke(site_app, "periodic", "import", "--django-settings", SETTINGS_MODULE, "--json")
    assert {s["outcome"] for s in json.loads(again.stdout) if s["name"] in IMPORTED} == {"same"}


@pytest.mark.promise("periodic-export-import-round-trip")
@SAME_TIMES_AS_CELERY
def test_the_export_loaded_with_loaddata_gives_rows_with_our_times(
    site_app: Any, tmp_path: Path
) -> None:
    make_rows()
    assert invoke(site_app, "periodic", "import", "--django-settings", SETTINGS_MODULE)
    before = {info.entry.name: definition(info.entry) for info in periodic.entries(site_app)}
    path = tmp_path / "fixture.json"
    exported = invoke(
        site_app, "periodic", "export", "--format", "django-celery-beat", "-o", str(path)
    )
    assert exported.exit_code == 0 and exported.stderr == "", exported.output
    for model in (PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule, ClockedSchedule):
        model.objects.all().delete()
    call_command("loaddata", str(path), verbosity=0)
    assert sorted(PeriodicTask.objects.values_list("name", flat=True)) == sorted(IMPORTED)
    assert_rows_give_our_times(site_app, IMPORTED)

    assert invoke(site_app, "periodic", "clear", "--yes").exit_code == 0
    back = invoke(site_app, "periodic", "import", "--django-settings", SETTINGS_MODULE)
    assert back.exit_code == 0, back.output
    after = {info.entry.name: definition(info.entry) for info in periodic.entries(site_app)}
    assert after == before
