"""The example site's periodic tasks edited in the Django admin, with real ``celery beat``
processes on celery_delayq.contrib.django_celery_beat's scheduler and a real worker,
sharing the test database file: a change saved in the admin applies from the next
occurrence, once across beats; a disabled row stops; the runs come back onto the rows;
a bad row stops no other. Beside them, what two of django-celery-beat's own beats do."""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from datetime import datetime, timedelta, timezone

import pytest
from django.utils import formats
from django.utils import timezone as django_time
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    PeriodicTasks,
)

from celery_delayq import periodic
from celery_delayq.periodic.writer import OccurrenceWriter
from celery_delayq.testing import wait_until

from ..helpers import runs
from .admin_forms import TASKS, change, delete, staff_client
from .test_site_worker import site_process

pytestmark = [
    pytest.mark.system,
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.django_db(transaction=True),
]

SETTINGS = "tests.django.settings_admin_beat"
TICK = "tests.django.site_tasks.tick"
SWEEP = "confirm-overdue-orders"  # the site's CELERY_BEAT_SCHEDULE names it
SECOND, TWO, MINUTE = timedelta(seconds=1), timedelta(seconds=2), timedelta(minutes=1)


def worker(redis_url: str):
    return site_process(
        redis_url, "worker", "-l", "info", "-P", "solo", "--without-mingle", ready="ready.",
        settings=SETTINGS,
    )  # fmt: skip


def beat(redis_url: str, *args: str):
    return site_process(
        redis_url, "beat", "-l", "info", *args, ready="beat: Starting", settings=SETTINGS
    )


def every(seconds: int) -> IntervalSchedule:
    return IntervalSchedule.objects.create(every=seconds, period=IntervalSchedule.SECONDS)


def occurrences(redis_client, entry: str) -> Counter[datetime]:
    """How many times each occurrence of ``entry`` ran."""
    return Counter(
        datetime.fromisoformat(run["occurrence"])
        for run in runs(redis_client)
        if run["entry"] == entry
    )


def stored(app, name: str):
    found = periodic.get(app, name)
    return None if found is None else found.entry


def new_rhythm(seen: list[datetime], anchor: datetime, step: timedelta) -> int:
    """Where the runs on the grid ``anchor + k * step`` begin, to the end of ``seen``."""
    start = len(seen)
    while start > 0 and (seen[start - 1] - anchor) % step == timedelta(0):
        if start < len(seen) and seen[start] - seen[start - 1] != step:
            break
        start -= 1
    return start


@pytest.mark.promise("django-admin-change-from-next-occurrence", "django-admin-any-number-of-beats")
def test_an_interval_changed_in_the_admin_applies_from_the_next_occurrence_once_across_two_beats(
    site_app, redis_server, redis_client
):
    admin = staff_client()
    two_seconds = every(2)
    row = PeriodicTask.objects.create(name="tick", task=TICK, interval=every(1))
    settle = OccurrenceWriter(site_app).settle
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url))
        wait_until(lambda: len(occurrences(redis_client, "tick")) >= 3, timeout=60)
        change(admin, row.pk, interval=two_seconds.pk)
        wait_until(lambda: stored(site_app, "tick").schedule.run_every == TWO, timeout=30)
        synced = datetime.now(timezone.utc)  # the store has it (its write was before)
        anchor = stored(site_app, "tick").anchor
        wait_until(
            lambda: max(occurrences(redis_client, "tick")) >= synced + settle + 4 * TWO,
            timeout=60,
        )
    seen = occurrences(redis_client, "tick")
    assert [when for when, count in seen.items() if count > 1] == []
    assert {run["periodic_task_name"] for run in runs(redis_client)} == {"tick"}
    ordered = sorted(seen)
    cut = new_rhythm(ordered, anchor, TWO)
    before, after = ordered[:cut], ordered[cut:]
    assert len(before) >= 3 and len(after) >= 4
    assert all(later - earlier == SECOND for earlier, later in zip(before, before[1:]))
    # one instant parts the two grids: every old occurrence before it ran, every new one after
    assert timedelta(0) < after[0] - before[-1] < SECOND + TWO
    assert after[0] <= synced + settle + TWO  # from the next occurrence after the settle window


@pytest.mark.promise("django-admin-disable-stops", "django-admin-any-number-of-beats")
def test_a_row_disabled_in_the_admin_runs_nothing_after_the_settle_window_and_deleted_is_gone(
    site_app, redis_server, redis_client
):
    admin = staff_client()
    second = every(1)
    row = PeriodicTask.objects.create(name="tick", task=TICK, interval=second)
    PeriodicTask.objects.create(name="tock", task=TICK, interval=second)  # runs on, a witness
    settle = OccurrenceWriter(site_app).settle
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url))
        wait_until(lambda: len(occurrences(redis_client, "tick")) >= 2, timeout=60)
        change(admin, row.pk, enabled=False)
        wait_until(lambda: not stored(site_app, "tick").enabled, timeout=30)
        paused = datetime.now(timezone.utc)
        wait_until(
            lambda: (
                max(occurrences(redis_client, "tock"), default=paused)
                > paused + settle + 3 * SECOND
            ),
            timeout=60,
        )
        assert [when for when in occurrences(redis_client, "tick") if when > paused + settle] == []
        delete(admin, row.pk)
        wait_until(lambda: stored(site_app, "tick") is None, timeout=30)
    for entry in ("tick", "tock"):
        assert [w for w, count in occurrences(redis_client, entry).items() if count > 1] == []


@pytest.mark.promise("django-admin-runs-shown")
def test_last_run_at_and_total_run_count_come_back_to_the_admins_row(
    site_app, redis_server, redis_client
):
    admin = staff_client()
    row = PeriodicTask.objects.create(name="tick", task=TICK, interval=every(1))
    changed, edited = PeriodicTasks.last_change(), row.date_changed
    with beat(redis_server.url):
        with worker(redis_server.url):
            wait_until(lambda: len(occurrences(redis_client, "tick")) >= 3, timeout=60)
        history = periodic.get(site_app, "tick").history  # the worker is gone: final
        assert history.total_run_count == len(runs(redis_client))
        wait_until(
            lambda: PeriodicTask.objects.filter(
                pk=row.pk,
                last_run_at=history.last_started,
                total_run_count=history.total_run_count,
            ).exists(),
            timeout=30,
        )
    row.refresh_from_db()
    shown = formats.localize(django_time.template_localtime(row.last_run_at))
    assert shown in admin.get(TASKS).content.decode()
    # copied as DatabaseScheduler saves them: the schedule is not marked changed
    assert (PeriodicTasks.last_change(), row.date_changed) == (changed, edited)


@pytest.mark.promise("django-admin-bad-row-stops-no-other")
def test_rows_that_cannot_run_are_logged_once_counted_and_paused_and_stop_no_other(
    site_app, redis_server, redis_client
):
    admin = staff_client()
    second = every(1)
    bad = {
        "unknown task": {"task": "shop.tasks.no_such_task", "interval": second},
        "bad crontab": {"task": TICK, "crontab": CrontabSchedule.objects.create(minute="99")},
        "bad args": {"task": TICK, "interval": second, "args": "[1,"},
        "args not a list": {"task": TICK, "interval": second, "args": '{"a": 1}'},
        SWEEP: {"task": TICK, "interval": second},  # CELERY_BEAT_SCHEDULE's
    }
    for name, fields in bad.items():
        PeriodicTask.objects.create(name=name, **fields)
    PeriodicTask.objects.create(name="tick", task=TICK, interval=second)
    tock = PeriodicTask.objects.create(name="tock", task=TICK, interval=second)
    with worker(redis_server.url), beat(redis_server.url) as started:
        wait_until(lambda: len(occurrences(redis_client, "tock")) >= 2, timeout=60)
        started.wait_for_output(f"{len(bad)} refused")
        change(admin, tock.pk, task="shop.tasks.typo")  # a slip in the admin
        wait_until(lambda: not stored(site_app, "tock").enabled, timeout=30)
        paused = datetime.now(timezone.utc)
        settle = OccurrenceWriter(site_app).settle
        wait_until(lambda: max(occurrences(redis_client, "tick")) > paused + settle, timeout=30)
    for name in bad:
        assert started.output.count(f"django-celery-beat row {name!r} is not run: ") == 1
    for name in list(bad)[:-1]:
        assert stored(site_app, name) is None
    assert stored(site_app, SWEEP).origin == "settings"
    for reason in (
        "no task 'shop.tasks.no_such_task' is registered",
        "args must be a JSON list, not dict",
        "an entry of beat_schedule has that name",
        "no task 'shop.tasks.typo' is registered",
    ):
        assert reason in started.output
    assert f"{len(bad) + 1} refused" in started.output
    assert {run["entry"] for run in runs(redis_client)} == {"tick", "tock"}
    assert [when for when in occurrences(redis_client, "tock") if when > paused + settle] == []


@pytest.mark.promise("django-admin-rows-win")
def test_a_pause_or_an_upsert_under_a_rows_name_is_undone_at_the_next_sync(
    site_app, redis_server, redis_client
):
    second = every(1)
    PeriodicTask.objects.create(name="tick", task=TICK, interval=second)
    PeriodicTask.objects.create(name="tock", task=TICK, interval=second)
    with worker(redis_server.url), beat(redis_server.url):
        wait_until(lambda: stored(site_app, "tock") is not None, timeout=60)
        periodic.pause(site_app, "tick")
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows it; this app not
            periodic.upsert(site_app, "tock", TICK, 30.0)
        assert stored(site_app, "tock").origin == "api"
        PeriodicTask.objects.create(name="another", task=TICK, interval=second)  # a change
        wait_until(lambda: stored(site_app, "another") is not None, timeout=30)
    assert stored(site_app, "tick").enabled
    tock = stored(site_app, "tock")
    assert (tock.origin, tock.schedule.run_every) == ("django", SECOND)


@pytest.mark.promise("django-admin-clocked-once")
def test_a_clocked_one_off_row_runs_once(site_app, redis_server, redis_client):
    at = django_time.now().replace(microsecond=0) + timedelta(seconds=8)  # kept to the ms
    PeriodicTask.objects.create(
        name="once",
        task=TICK,
        one_off=True,
        clocked=ClockedSchedule.objects.create(clocked_time=at),
    )
    PeriodicTask.objects.create(name="tick", task=TICK, interval=every(1))
    settle = OccurrenceWriter(site_app).settle
    with worker(redis_server.url), beat(redis_server.url), beat(redis_server.url):
        wait_until(
            lambda: max(occurrences(redis_client, "tick") or [at]) > at + settle + 2 * SECOND,
            timeout=60,
        )
    assert occurrences(redis_client, "once") == Counter({at: 1})


@pytest.mark.promise("django-two-database-schedulers-double")
def test_two_database_scheduler_beats_each_send_every_entry(site_app, redis_server, redis_client):
    PeriodicTask.objects.create(name="tick", task=TICK, interval=every(2))
    scheduler = "django_celery_beat.schedulers:DatabaseScheduler"
    with ExitStack() as stack:
        stack.enter_context(worker(redis_server.url))
        for _ in range(2):
            stack.enter_context(beat(redis_server.url, "-S", scheduler))
        wait_until(lambda: len(runs(redis_client)) >= 10, timeout=60)
    sent = [run for run in runs(redis_client) if run["periodic_task_name"] == "tick"]
    span = sent[-1]["at"] - sent[0]["at"]
    # one beat would have sent at most one run every 2 seconds
    assert len(sent) > span / 2 + 2


@pytest.mark.promise("periodic-change-log")
def test_each_admin_change_is_in_the_entrys_history_with_its_user(site_app, redis_server):
    """A row made by code is recorded as the admin's (no user known); its change saved
    in the admin, as the admin user's; its deletion; each once, though two beats sync."""
    admin = staff_client("ada")
    row = PeriodicTask.objects.create(name="tick", task=TICK, interval=every(60))
    with ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(beat(redis_server.url))
        wait_until(lambda: stored(site_app, "tick") is not None, timeout=30)
        change(admin, row.pk, interval=every(120).pk)
        wait_until(lambda: stored(site_app, "tick").schedule.run_every == 2 * MINUTE, timeout=30)
        delete(admin, row.pk)
        wait_until(lambda: stored(site_app, "tick") is None, timeout=30)
    removed, updated, created = periodic.changes(site_app, "tick")
    assert (created.who, created.via, created.action) == ("admin", "admin", "created")
    assert created.detail.endswith("(no admin user known)")
    assert (updated.who, updated.via, updated.action) == ("ada", "admin", "updated")
    assert list(updated.changed) == ["schedule"] and "120" in (updated.changed["schedule"][1] or "")
    assert updated.detail.startswith(f"row {row.pk} changed ")
    assert (removed.action, removed.detail) == ("removed", "row deleted")
