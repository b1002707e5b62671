"""``celery delayq periodic import --module``: a ``beat_schedule`` module's items are
imported with the times Celery's own beat gives them from its start (the import), for a
year, in the app's time zone; an item delayq's beat would refuse is skipped, with why."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.beat import ScheduleEntry

from celery_delayq import periodic

from ...helpers import PERIODIC_TASK as TASK
from ...helpers import invoke
from .stepping import YEAR, assert_same_times, celery_runs

pytestmark = pytest.mark.integration

UTC = timezone.utc
ZONE = "Asia/Kolkata"  # no change of the clocks: any Celery computes the same
MODULE = f"""
from datetime import timedelta

from celery.schedules import crontab, schedule, solar

TASK = {TASK!r}
beat_schedule = {{
    "every-3h": {{"task": TASK, "schedule": timedelta(hours=3), "args": [1, "a"]}},
    "every-7h": {{"task": TASK, "schedule": 7 * 3600.0, "options": {{"queue": "default"}}}},
    "relative-90m": {{"task": TASK, "schedule": timedelta(minutes=90), "relative": True}},
    "weekdays": {{"task": TASK, "schedule": crontab(minute=30, hour=9, day_of_week="mon-fri")}},
    "six-hourly": {{"task": TASK, "schedule": crontab(minute=0, hour="*/6"), "kwargs": {{"k": 1}}}},
    "sunrise": {{"task": TASK, "schedule": solar("sunrise", 52.52, 13.405)}},
    "delayed": {{"task": TASK, "schedule": 60.0, "options": {{"countdown": 5}}}},
    "unknown-key": {{"task": TASK, "schedule": 60.0, "expires_at": "tomorrow"}},
}}
"""
GOOD = ["every-3h", "every-7h", "relative-90m", "weekdays", "six-hourly", "sunrise"]


@pytest.fixture
def app(zoned_app: Any) -> Celery:
    return zoned_app(ZONE)


@pytest.mark.promise("periodic-import-same-occurrences", "periodic-import-skipped-named")
def test_a_modules_items_are_imported_with_the_times_celerys_beat_gives_them_for_a_year(
    app: Celery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "delayq_transfer_settings.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    done = invoke(app, "periodic", "import", "--module", "delayq_transfer_settings", "--json")
    steps = {step["name"]: step for step in json.loads(done.stdout)}
    assert done.exit_code == 1 and sorted(steps) == sorted([*GOOD, "delayed", "unknown-key"])
    assert "countdown" in steps["delayed"]["reason"]
    assert "unknown keys ['expires_at']" in steps["unknown-key"]["reason"]
    assert {steps[name]["outcome"] for name in GOOD} == {"added"}

    namespace: dict[str, Any] = {}
    exec(MODULE, namespace)
    after, until = datetime.now(UTC), datetime.now(UTC) + YEAR
    for name in GOOD:
        info = periodic.get(app, name)
        assert info is not None and info.entry.timezone == ZONE and info.entry.origin == "api"
        spec = namespace["beat_schedule"][name]
        theirs = ScheduleEntry(name=name, app=app, **spec)  # as Celery's beat reads it
        assert (info.entry.args, dict(info.entry.kwargs)) == (tuple(theirs.args), theirs.kwargs)
        assert dict(info.entry.options) == theirs.options
        started = info.entry.anchor  # Celery's beat counts from its start: the import
        runs = celery_runs(theirs.schedule, started, ZoneInfo(ZONE), after, until)
        assert_same_times(info.entry, runs, after, until)
    assert info.entry.anchor - after < timedelta(seconds=5)
