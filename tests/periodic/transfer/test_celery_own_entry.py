"""``celery.backend_cleanup``, which Celery's beat (and delayq's, alike) adds by itself when
results expire and the result backend does not expire them: ``periodic.get``, the
listing and ``periodic list`` say so, with why; an export for another scheduler leaves it
to that scheduler's beat, which adds its own."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from celery import Celery
from celery.schedules import crontab

from celery_delayq import periodic
from celery_delayq.beat import Scheduler
from celery_delayq.periodic.describe import BACKEND_CLEANUP
from celery_delayq.periodic.manage import sync_settings

from ...helpers import invoke

pytestmark = pytest.mark.integration


def beat_started(app: Celery) -> None:
    """What a delayq beat's start writes: ``beat_schedule`` with Celery's own entry."""
    sync_settings(app, Scheduler(app, lazy=True).settings_schedule, datetime.now(timezone.utc))


def test_celerys_own_entry_is_labelled_with_why_and_left_out_of_other_schedulers_forms(
    make_app, tmp_path: Path
) -> None:
    app = make_app()  # no result backend: Celery's beat adds the cleanup (result_expires)
    beat_started(app)
    info = periodic.get(app, BACKEND_CLEANUP)
    assert info is not None and info.added_by is not None
    assert info.added_by.startswith("added by Celery") and "result_expires" in info.added_by
    assert [each.added_by for each in periodic.listing(app).entries] == [info.added_by]

    listed = invoke(app, "periodic", "list")
    assert f"{BACKEND_CLEANUP}: {info.added_by}" in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if line.startswith(BACKEND_CLEANUP))
    assert "  celery  " in row
    as_json = json.loads(invoke(app, "periodic", "list", "--json").stdout)
    assert as_json[0]["added_by"] == info.added_by and as_json[0]["origin"] == "settings"

    for form in ("beat_schedule", "django-celery-beat", "redbeat"):
        path = tmp_path / form
        done = invoke(app, "periodic", "export", "--format", form, "-o", str(path))
        assert f"skipped {BACKEND_CLEANUP!r}: added by Celery" in done.stderr, form
        assert BACKEND_CLEANUP not in path.read_text(), form
    ours = invoke(app, "periodic", "export", "-o", str(tmp_path / "ours.json"))
    assert ours.stderr == "" and BACKEND_CLEANUP in (tmp_path / "ours.json").read_text()


def test_an_entry_of_that_name_the_settings_define_is_not_labelled(make_app) -> None:
    schedule = {BACKEND_CLEANUP: {"task": BACKEND_CLEANUP, "schedule": crontab("0", "5", "*")}}
    app = make_app(beat_schedule=schedule)
    beat_started(app)
    info = periodic.get(app, BACKEND_CLEANUP)
    assert info is not None and info.added_by is None
    assert info.entry.schedule.hour == {5}
