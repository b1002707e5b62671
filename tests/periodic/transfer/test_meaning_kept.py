"""What a row means in the other scheduler is what it means here, both ways, for the rows
that are easy to get wrong: a redbeat rule from a zone that kept another UTC offset when
it started, a django-celery-beat one-off that has run (or one of ours that has ended), a
fixture's naive times and long descriptions; and a crafted fixture object stops only
itself. Read and written in-process (no server: the forms are plain data)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from celery import Celery

from celery_delayq.periodic.entry import PeriodicEntry
from celery_delayq.periodic.manage import EntryInfo
from celery_delayq.periodic.schedules.clocked import clocked
from celery_delayq.periodic.transfer import beat_module, django_fixture, redbeat_keys
from celery_delayq.periodic.transfer.model import Incoming, Skipped

from ...helpers import PERIODIC_TASK as TASK

pytestmark = pytest.mark.unit

UTC = timezone.utc
NOW = datetime(2026, 11, 29, 8, tzinfo=UTC)


def app_in(zone: str) -> Celery:
    app = Celery("meaning", set_as_current=False)
    app.conf.timezone = zone
    return app


# --- redbeat -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "zone, start",
    [  # each zone keeps the rule's offset now, not when the rule started
        ("Europe/Istanbul", datetime(2015, 1, 1, 9, tzinfo=timezone(timedelta(hours=3)))),
        ("America/Sao_Paulo", datetime(2018, 1, 10, 9, tzinfo=timezone(timedelta(hours=-3)))),
    ],
)
def test_a_redbeat_rule_started_when_the_apps_zone_kept_another_offset_keeps_its_times(
    zone: str, start: datetime
) -> None:
    """redbeat fires a rule at its start's offset; its start read as a wall time of the
    app's zone at that date (+02:00 in Istanbul in 2015) would move every run an hour."""
    pytest.importorskip("redbeat")
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedules import rrule

    app = app_in(zone)
    rule = rrule("DAILY", dtstart=start, app=app)
    definition = {"name": "daily", "task": TASK, "schedule": rule, "enabled": True}
    document = {
        "format": "redbeat",
        "keys": {
            "redbeat:daily": {
                "definition": json.dumps(definition, cls=RedBeatJSONEncoder),
                "meta": json.dumps({"last_run_at": NOW}, cls=RedBeatJSONEncoder),
            }
        },
    }
    [found] = redbeat_keys.read_document(app, document, NOW)
    assert isinstance(found, Incoming), found
    theirs = rule.rrule.after(NOW)
    moment = NOW
    for _ in range(400):  # a year of runs, each where redbeat has it
        moment = found.entry.occurrences().after(moment)
        assert moment == theirs
        theirs = rule.rrule.after(theirs)
    assert found.notes and "all year" in found.notes[0]


# --- django-celery-beat --------------------------------------------------------------------------


def task_object(pk: Any, **fields: Any) -> dict[str, Any]:
    base = {"task": TASK, "args": "[]", "kwargs": "{}", "enabled": True, "one_off": False}
    return {"model": "django_celery_beat.periodictask", "pk": pk, "fields": {**base, **fields}}


INTERVAL = {"model": "django_celery_beat.intervalschedule", "pk": 1,
            "fields": {"every": 1, "period": "days"}}  # fmt: skip


def read_fixture(objects: list[Any]) -> dict[str, Any]:
    rows = django_fixture.fixture_rows(objects)
    return {found.entry.name if isinstance(found, Incoming) else found.name: found
            for found in django_fixture.read(app_in("UTC"), rows, NOW)}  # fmt: skip


def test_a_crafted_fixture_object_stops_only_itself() -> None:
    """A primary key or a schedule reference that is a list (no row of loaddata's), fields
    that are not a mapping, a task with no primary key (loaddata adds it)."""
    ran = {"last_run_at": "2026-11-29T07:00:00Z", "interval": 1}
    found = read_fixture(
        [
            INTERVAL,
            {"model": "django_celery_beat.intervalschedule", "pk": [1], "fields": {}},
            task_object([2], name="listed-pk", **ran),
            task_object(3, name="listed-ref", interval=[1]),
            {"model": "django_celery_beat.periodictask", "pk": 4, "fields": ["name"]},
            task_object(5, name="good", **ran),
            task_object(None, name="no-pk", **ran),
            task_object(None, name="no-pk-either", **ran),
        ]
    )
    assert {name for name, each in found.items() if isinstance(each, Incoming)} == {
        "good",
        "listed-pk",  # loaddata would refuse its pk; its fields are a task's all the same
        "no-pk",
        "no-pk-either",
    }
    assert isinstance(found["listed-ref"], Skipped) and isinstance(found["None"], Skipped)


def test_a_one_off_that_has_run_there_is_kept_paused() -> None:
    """``DatabaseScheduler`` runs a one-off once: at its next check after a run
    (``total_run_count`` > 0) it disables the row instead of running it again."""
    ran = {"interval": 1, "one_off": True, "last_run_at": "2026-11-29T07:00:00Z"}
    found = read_fixture(
        [
            INTERVAL,
            task_object(1, name="ran", total_run_count=1, **ran),
            task_object(2, name="not-yet", total_run_count=0, **ran),
        ]  # fmt: skip
    )
    ran_once, not_yet = found["ran"], found["not-yet"]
    assert isinstance(ran_once, Incoming) and ran_once.entry.enabled is False
    assert any("kept paused" in note for note in ran_once.notes)
    assert isinstance(not_yet, Incoming) and not_yet.entry.enabled is True


def test_an_ended_one_off_or_clocked_entry_is_exported_disabled() -> None:
    """django-celery-beat would run an enabled one-off row with no run counted (and a
    clocked one whose time has passed) at once: one whose run is behind it here goes
    disabled, and the export says so."""
    made = NOW - timedelta(days=3)
    entries = [
        PeriodicEntry("ran", TASK, 3600.0, anchor=made, timezone="UTC", one_off=True),
        PeriodicEntry("at", TASK, clocked(NOW - timedelta(days=1)), anchor=made, timezone="UTC"),
        PeriodicEntry("ahead", TASK, clocked(NOW + timedelta(days=1)), anchor=made, timezone="UTC"),
        PeriodicEntry("hourly", TASK, 3600.0, anchor=made, timezone="UTC"),
    ]
    infos = [EntryInfo(entry, 1, []) for entry in entries]
    exported = django_fixture.export(app_in("UTC"), infos, NOW)
    rows = {obj["fields"]["name"]: obj["fields"] for obj in json.loads(exported.text)
            if obj["model"] == "django_celery_beat.periodictask"}  # fmt: skip
    assert {name: row["enabled"] for name, row in rows.items()} == {
        "ran": False,
        "at": False,
        "ahead": True,
        "hourly": True,
    }
    assert sum("no run left" in note for note in exported.notes) == 2


def test_a_fixtures_naive_time_is_refused_saying_where_it_is_read() -> None:
    """A USE_TZ = False site writes its times naive, in its TIME_ZONE, which its fixture
    does not say: refused, naming --django-settings (which reads them in it)."""
    found = read_fixture([INTERVAL, task_object(1, name="naive", interval=1,
                          last_run_at="2026-11-29T07:00:00")])  # fmt: skip
    skipped = found["naive"]
    assert isinstance(skipped, Skipped) and "--django-settings" in skipped.reason


def test_a_description_longer_than_kept_here_is_cut_and_said() -> None:
    long = "é" * 1500
    found = read_fixture([INTERVAL, task_object(1, name="long", interval=1, description=long,
                          last_run_at="2026-11-29T07:00:00Z")])  # fmt: skip
    incoming = found["long"]
    assert isinstance(incoming, Incoming) and incoming.entry.description == long[:1000]
    assert any("description is cut" in note for note in incoming.notes)


# --- beat_schedule -------------------------------------------------------------------------------


def test_a_beat_schedule_module_is_ascii_and_reads_back_any_text(tmp_path: Any) -> None:
    """The module is written in the locale's encoding (cp1252 on Windows has no ☕) and
    read as UTF-8: written in ASCII, with escapes, it reads back the same in any."""
    entry = PeriodicEntry(
        "café ☕",
        TASK,
        3600.0,
        anchor=NOW,
        timezone="UTC",
        args=("naïve", "☕"),
        kwargs={"ключ": "値"},
        description="Grüße 🌍",
    )
    exported = beat_module.export(app_in("UTC"), [EntryInfo(entry, 1, [])], NOW)
    assert exported.text.isascii()
    path = tmp_path / "schedule.py"
    path.write_text(exported.text, encoding="ascii")
    [found] = beat_module.read(app_in("UTC"), beat_module.beat_schedule_of(str(path)), NOW)
    assert isinstance(found, Incoming), found
    back = found.entry
    assert (back.name, back.args, dict(back.kwargs), back.description) == (
        entry.name,
        entry.args,
        dict(entry.kwargs),
        entry.description,
    )
