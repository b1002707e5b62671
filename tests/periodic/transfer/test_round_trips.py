"""``celery delayq periodic export`` then ``import`` (in-process, against a real Redis):
each form gives back the entries it can hold, and names those it cannot; a dry run says
what would change and writes nothing; one entry a source holds that cannot be kept here
is skipped, with why, and stops no other."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from celery_delayq import periodic
from celery_delayq.periodic.schedules.clocked import clocked
from celery_delayq.periodic.transfer.model import rule_of

from ...helpers import PERIODIC_TASK as TASK
from ...helpers import invoke
from .stepping import YEAR, assert_same_times, year_of

pytestmark = pytest.mark.integration

UTC = timezone.utc


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def add_entries(app: Celery) -> None:
    """One of each kind: intervals (plain, relative, fractional), crontabs (one in
    another zone than the app's), a solar, a paused entry, options, arguments."""
    periodic.upsert(
        app, "every-3h", TASK, 3 * 3600.0, args=[1, "a"], kwargs={"k": [True]}, overlap="skip"
    )
    periodic.upsert(app, "every-2.5s", TASK, 2.5, options={"queue": "default", "priority": 3})
    periodic.upsert(app, "relative", TASK, schedule(timedelta(minutes=90), relative=True))
    periodic.upsert(app, "cron", TASK, crontab("*/15", "8-18", "mon-fri"), options={"expires": 60})
    periodic.upsert(app, "berlin", TASK, crontab(30, 2), timezone="Europe/Berlin")
    periodic.upsert(app, "sunrise", TASK, solar("sunrise", 52.52, 13.405))
    periodic.upsert(app, "paused", TASK, 60.0, enabled=False, catch_up="all")
    soon = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=100)
    periodic.upsert(app, "once", TASK, clocked(soon), description="the New Year report")
    periodic.upsert(app, "rule", TASK, "FREQ=WEEKLY;BYDAY=MO;COUNT=30")
    periodic.upsert(app, "bounded", TASK, 60.0, start_time=soon, expires=soon + timedelta(days=1))
    until = (datetime.now(UTC) + timedelta(days=200)).strftime("%Y%m%dT%H%M%S")
    periodic.upsert(app, "rule-until", TASK, f"{RULE_START}\nRRULE:{UNTIL_RULE};UNTIL={until}")
    periodic.upsert(app, "berlin-rule", TASK, UNTIL_RULE, timezone="Europe/Berlin")
    periodic.upsert(app, "last-fridays", TASK, f"{RULE_START}\nRRULE:FREQ=MONTHLY;BYDAY=-1FR")
    periodic.upsert(app, "next-first", TASK, crontab(0, 0, day_of_month=1), one_off=True)
    periodic.upsert(app, "ends", TASK, crontab(0, "*/4"), expires=datetime.now(UTC) + YEAR / 2)
    end = datetime.now(UTC) + YEAR / 3
    periodic.upsert(app, "both-ends", TASK, 7200.0, expires=end, options={"expires": 60})


def stored(app: Celery) -> dict[str, Any]:
    """Every entry as the store keeps it, by name."""
    return {info.entry.name: info.entry for info in periodic.entries(app)}


def definition(entry: Any) -> dict[str, Any]:
    """What defines an entry, its anchor left out."""
    data = json.loads(entry.to_json())
    del data["anchor_ms"]
    return data


RULE_START = "DTSTART:20250106T091500"
UNTIL_RULE = "FREQ=DAILY;INTERVAL=2;BYHOUR=9,17;BYMINUTE=0;BYSECOND=0"
#: What each form cannot hold of ``add_entries``' entries, and why (on stderr).
RULES = {n: "an rrule schedule" for n in ("rule", "rule-until", "berlin-rule", "last-fridays")}
SKIPPED = {
    "json": {},
    "beat_schedule": {"berlin": "Europe/Berlin is not the app's", "paused": "paused"},
    "django-celery-beat": {"relative": "relative", "both-ends": "keeps one of them", **RULES},
    "redbeat": {
        "berlin": "Europe/Berlin is not the app's",
        "sunrise": "solar",
        "once": "a clocked schedule: redbeat has none",
        "bounded": "start_time, expires: redbeat's entries have none",
        "next-first": "one_off",
        "ends": "expires",
        "both-ends": "expires",
        "berlin-rule": "whose UTC offset changes",
        "last-fridays": "a BYDAY with a position",
    },
}
#: The forms that say where an interval counts from (the others: from the import).
ANCHORED = {"json", "django-celery-beat", "redbeat"}


@pytest.mark.promise("periodic-export-import-round-trip")
@pytest.mark.parametrize("form", list(SKIPPED))
def test_each_form_exported_then_imported_gives_back_the_entries_it_holds(
    app: Celery, tmp_path: Path, form: str
) -> None:
    add_entries(app)
    before = stored(app)
    path = tmp_path / ("schedule.py" if form == "beat_schedule" else "entries.json")
    exported = invoke(app, "periodic", "export", "--format", form, "-o", str(path))
    assert exported.exit_code == 0, exported.output
    for name, why in SKIPPED[form].items():
        assert f"skipped {name!r}: " in exported.stderr and why in exported.stderr
    if form != "json":  # the others start every occurrence
        assert "every-3h: overlap 'skip' is not kept" in exported.stderr
    assert invoke(app, "periodic", "clear", "--yes").exit_code == 0
    assert stored(app) == {}

    imported = invoke(app, "periodic", "import", str(path), "--json")
    assert imported.exit_code == 0, imported.output
    again = invoke(app, "periodic", "import", str(path), "--json")
    assert {step["outcome"] for step in json.loads(again.stdout)} == {"same"}
    after, now = stored(app), datetime.now(UTC)
    kept = {name: entry for name, entry in before.items() if name not in SKIPPED[form]}
    assert sorted(after) == sorted(kept)
    for name, entry in kept.items():
        expected = expected_back(form, entry)
        assert definition(after[name]) == expected, name
        counted_from_import = "every" in expected["schedule"] and "start_ms" not in expected
        if form in ANCHORED or not counted_from_import:  # a year of the same times
            theirs, until = year_of(entry, now)
            assert_same_times(after[name], theirs, now, until, fewest=1)
    if form == "json":
        assert {n: e.anchor for n, e in after.items()} == {n: e.anchor for n, e in kept.items()}


def expected_back(form: str, entry: Any) -> dict[str, Any]:
    """What defines ``entry`` once exported in ``form`` and imported again."""
    expected = definition(entry)
    if form == "beat_schedule":  # a beat_schedule item keeps no pause, catch_up nor overlap
        expected.update(catch_up="latest", enabled=True)
    if form in ("django-celery-beat", "redbeat"):
        expected.update(catch_up="latest")
    if form != "json":
        expected.pop("overlap", None)
    if form == "django-celery-beat" and "crontab" in expected["schedule"]:
        cron = expected["schedule"]["crontab"]  # django-celery-beat keeps text
        cron.update({field: str(value) for field, value in cron.items()})
    if "rrule" in expected["schedule"] and form != "json":  # written with its start
        expected["schedule"]["dtstart"] = rule_of(entry)[1].isoformat()
    if "clocked" in expected["schedule"] and form == "django-celery-beat":
        expected["one_off"] = True  # django-celery-beat's clocked tasks are one-off
    return expected


def keys_and_values(client: Any) -> dict[bytes, Any]:
    """Every key of the Redis with its value (DUMP) and time to live."""
    return {key: (client.dump(key), client.pttl(key)) for key in client.keys("*")}


def assert_unchanged(now: dict[bytes, Any], before: dict[bytes, Any]) -> None:
    """The same keys and values as ``before``, no time to live set or renewed (one that
    runs, a change log's, is lower now)."""
    assert {key: dump for key, (dump, _) in now.items()} == {k: d for k, (d, _) in before.items()}
    assert all(0 <= now[key][1] <= ttl or now[key][1] == ttl for key, (_, ttl) in before.items())


@pytest.mark.promise("periodic-import-dry-run-writes-nothing")
def test_a_dry_run_says_what_would_change_and_writes_nothing(
    app: Celery, redis_client: Any, tmp_path: Path
) -> None:
    add_entries(app)
    path = tmp_path / "entries.json"
    assert invoke(app, "periodic", "export", "-o", str(path)).exit_code == 0
    document = json.loads(path.read_text())
    entries = {each["name"]: each for each in document["entries"]}
    entries["cron"]["args"] = [2]
    berlin = entries["berlin"]["schedule"]["crontab"]  # as django-celery-beat keeps it
    berlin.update(minute="30", hour="2")
    entries["every-3h"]["anchor_ms"] += 60_000  # the same rhythm, a minute later
    entries["bounded"]["expires_ms"] += 3_600_000
    entries["new"] = {**entries["paused"], "name": "new"}
    entries["broken"] = {**entries["paused"], "name": "broken", "timezone": "Moon/Base"}
    entries["unsendable"] = {
        **entries["paused"],
        "name": "unsendable",
        "options": {"serializer": "nope"},
    }
    document["entries"] = list(entries.values())
    path.write_text(json.dumps(document))
    periodic.remove(app, "sunrise")
    before = keys_and_values(redis_client)

    dry = invoke(app, "periodic", "import", str(path), "--dry-run", "--json")
    assert_unchanged(keys_and_values(redis_client), before)
    steps = {step["name"]: step for step in json.loads(dry.stdout)}
    assert steps["cron"]["outcome"] == "changed" and steps["cron"]["fields"] == ["args"]
    assert steps["every-3h"]["fields"] == ["anchor"]
    assert steps["bounded"]["fields"] == ["expires"]
    assert {steps[name]["outcome"] for name in ("new", "sunrise", "unsendable")} == {"added"}
    assert {steps[name]["outcome"] for name in ("paused", "relative", "berlin")} == {"same"}
    assert steps["broken"]["outcome"] == "skipped" and "Moon/Base" in steps["broken"]["reason"]
    assert dry.exit_code == 1  # one is skipped

    table = invoke(app, "periodic", "import", str(path), "--dry-run").stdout
    assert "would be changed  args" in table and "dry run: nothing was written" in table
    assert_unchanged(keys_and_values(redis_client), before)

    done = {
        step["name"]: step
        for step in json.loads(invoke(app, "periodic", "import", str(path), "--json").stdout)
    }
    # the dry run checks fields; the import builds each message too, and skips what fails
    assert done.pop("unsendable")["reason"].startswith("periodic entry 'unsendable' refused")
    assert {n: s["outcome"] for n, s in done.items()} == {
        n: s["outcome"] for n, s in steps.items() if n != "unsendable"
    }
    assert periodic.get(app, "cron").entry.args == (2,)
    assert periodic.get(app, "new") is not None and periodic.get(app, "broken") is None


def fixture_rows(tmp_path: Path) -> Path:
    """A django-celery-beat fixture (as ``dumpdata`` writes it) with rows an entry here
    cannot hold among good ones."""
    schedules = [
        {"model": "django_celery_beat.intervalschedule", "pk": 1,
         "fields": {"every": 10, "period": "minutes"}},
        {"model": "django_celery_beat.crontabschedule", "pk": 1,
         "fields": {"minute": "61", "hour": "*", "day_of_week": "*", "day_of_month": "*",
                    "month_of_year": "*", "timezone": "UTC"}},
        {"model": "django_celery_beat.clockedschedule", "pk": 1,
         "fields": {"clocked_time": "2031-01-01T00:00:00Z"}},
        {"model": "django_celery_beat.clockedschedule", "pk": 2,
         "fields": {"clocked_time": "2020-01-01T00:00:00Z"}},
    ]  # fmt: skip
    base = {"args": "[]", "kwargs": "{}", "enabled": True, "one_off": False,
            "date_changed": "2020-01-01T00:00:00Z", "interval": 1}  # fmt: skip
    tasks = [
        {"name": "good", "task": TASK, **base, "last_run_at": "2020-01-01T00:03:00Z"},
        {"name": "once", "task": TASK, **base, "interval": None, "clocked": 1, "one_off": True},
        {"name": "gone", "task": TASK, **base, "interval": None, "clocked": 2, "one_off": True},
        {"name": "ends", "task": TASK, **base, "expires": "2031-06-01T00:00:00Z"},
        {
            "name": "ends-first",
            "task": TASK,
            **base,
            "expires": "2031-06-01T00:00:00Z",
            "start_time": "2031-07-01T00:00:00Z",
        },
        {"name": "bad-cron", "task": TASK, **base, "interval": None, "crontab": 1},
        {"name": "bad-args", "task": TASK, **base, "args": "[not json"},
        {"name": "nothing", "task": TASK, **base, "interval": None},
        {"name": "also-good", "task": TASK, **base, "description": "why it runs"},
    ]
    rows = [{"model": "django_celery_beat.periodictask", "pk": n, "fields": task}
            for n, task in enumerate(tasks, 1)]  # fmt: skip
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(schedules + rows))
    return path


@pytest.mark.promise("periodic-import-skipped-named")
def test_a_row_that_cannot_be_kept_is_skipped_with_why_and_stops_no_other(
    app: Celery, tmp_path: Path
) -> None:
    done = invoke(app, "periodic", "import", str(fixture_rows(tmp_path)))
    assert done.exit_code == 1
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:] if line.strip()}
    assert "expires must be after start_time" in lines["ends-first"]
    assert "skipped" in lines["gone"] and "has ended" in lines["gone"]
    assert "61" in lines["bad-cron"] and "skipped" in lines["bad-args"]
    assert "no schedule row" in lines["nothing"]
    assert sorted(stored(app)) == ["also-good", "ends", "good", "once"]
    once, ends = periodic.get(app, "once"), periodic.get(app, "ends")
    assert once is not None and once.next_runs == [datetime(2031, 1, 1, tzinfo=UTC)]
    assert ends is not None and ends.entry.expires == datetime(2031, 6, 1, tzinfo=UTC)
    also_good = periodic.get(app, "also-good")
    assert also_good is not None and also_good.entry.description == "why it runs"
    good = periodic.get(app, "good")
    assert good is not None  # counts from its last run there, every 10 minutes
    assert (good.next_runs[0] - datetime(2020, 1, 1, 0, 3, tzinfo=UTC)) % timedelta(minutes=10) == (
        timedelta(0)
    )
