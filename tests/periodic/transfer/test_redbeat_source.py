"""``celery delayq periodic import --redbeat-url``: entries written by redbeat's own
``RedBeatSchedulerEntry.save()`` into a private redis-server are imported with the times
redbeat gives them, for a year (its ``rrule`` schedules included, with a ``COUNT``, an
``UNTIL``, a start at another UTC offset than the app's); what the store cannot hold is
skipped, with why; and an export loaded as redbeat loads it gives the same runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule

from celery_delayq import periodic
from celery_delayq.periodic.transfer.plan import same_times
from celery_delayq.testing import RedisServer

from ...helpers import PERIODIC_TASK as TASK
from ...helpers import invoke
from .stepping import YEAR, assert_same_times, celery_runs
from .test_round_trips import definition, expected_back

redbeat = pytest.importorskip("redbeat")
from redbeat.schedulers import RedBeatSchedulerEntry, get_redis  # noqa: E402
from redbeat.schedules import rrule  # noqa: E402

pytestmark = pytest.mark.integration

UTC = timezone.utc
ZONE = "Asia/Tokyo"  # the apps' time zone: redbeat reads a crontab in it
NOW = datetime.now(UTC)


@pytest.fixture(scope="module")
def redbeat_server() -> Iterator[RedisServer]:
    """redbeat's own Redis, apart from the store's."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def redbeat_app(redbeat_server: RedisServer) -> Iterator[Celery]:
    """The app whose beat would be redbeat's, on its Redis (flushed)."""
    redbeat_server.client().flushall()
    app = Celery("redbeat-source", set_as_current=False)
    app.conf.update(redbeat_redis_url=redbeat_server.url, timezone=ZONE)
    yield app
    app.close()


@pytest.fixture
def app(zoned_app: Any) -> Celery:
    return zoned_app(ZONE)


TOKYO, BERLIN = ZoneInfo(ZONE), ZoneInfo("Europe/Berlin")
#: redbeat's rules (dateutil's fields; each start an aware time, kept at its UTC offset).
RULES: dict[str, Any] = {
    "rule-daily": rrule(
        "DAILY", dtstart=NOW.astimezone(TOKYO) - timedelta(days=3), byhour=[9, 18], byminute=[30]
    ),
    "rule-count": rrule(
        "WEEKLY",
        count=20,
        byweekday=[0, 3],
        byhour=[10],
        dtstart=NOW.astimezone(TOKYO) - timedelta(days=8),
    ),
    "rule-until": rrule(
        "DAILY", interval=3, dtstart=NOW - timedelta(days=1), until=NOW + timedelta(days=100)
    ),  # from UTC: kept in UTC, not the app's zone
    "rule-berlin": rrule("DAILY", dtstart=datetime(2026, 1, 5, 9, tzinfo=BERLIN)),  # at +01:00
}
#: Those it holds that an entry here cannot, and why.
BAD_RULES: dict[str, Any] = {
    "rule-kolkata": (
        rrule("DAILY", dtstart=datetime(2026, 1, 5, 9, tzinfo=ZoneInfo("Asia/Kolkata"))),
        "no zone here keeps it",
    ),
    "rule-easter": (rrule("YEARLY", byeaster=0, dtstart=NOW), "BYEASTER"),
}

#: Our rules, in the app's zone, that redbeat can hold (its start written: one has none).
OUR_RULES = {
    "our-count": "DTSTART:20261101T083000\nRRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=60",
    "our-until": "DTSTART:20261101T200000\nRRULE:FREQ=DAILY;INTERVAL=2;UNTIL=20270901T000000",
    "our-no-start": "FREQ=MONTHLY;BYMONTHDAY=1,15;BYHOUR=6;BYMINUTE=0;BYSECOND=0",
}

#: What redbeat holds: (name, schedule, its last run, extra definition).
SAVED: list[tuple[str, Any, datetime | None, dict[str, Any]]] = [
    ("every-3h", schedule(timedelta(hours=3)), NOW - timedelta(minutes=61, microseconds=7), {}),
    ("every-90m", schedule(timedelta(minutes=90)), datetime(2019, 5, 1, 3, 7, tzinfo=UTC), {}),
    ("relative-2h", schedule(timedelta(hours=2), relative=True), NOW - timedelta(minutes=30), {}),
    ("weekdays", crontab("30", "9", "mon-fri"), NOW, {"args": [1], "kwargs": {"k": "v"}}),
    ("six-hourly", crontab("0", "*/6"), NOW, {"options": {"queue": "default", "expires": 60}}),
    ("monthly", crontab(0, 0, day_of_month=1), NOW, {}),
    ("paused", schedule(timedelta(minutes=1)), NOW, {"enabled": False}),
]


def save_entries(app: Celery) -> None:
    """The entries of ``SAVED``, an rrule, Celery's cleanup, and a definition that redbeat
    does not schedule, each saved by redbeat."""
    for name, every, last, extra in SAVED:
        entry = RedBeatSchedulerEntry(name, TASK, every, app=app, **extra)
        entry.last_run_at = last
        entry.save()
    fresh = RedBeatSchedulerEntry("fresh", TASK, schedule(timedelta(minutes=10)), app=app)
    fresh.last_run_at = None  # never ran: redbeat runs it at once
    fresh.save()
    rules = {**RULES, **{name: rule for name, (rule, _) in BAD_RULES.items()}}
    for name, rule in rules.items():
        entry = RedBeatSchedulerEntry(name, TASK, rule, app=app)
        entry.last_run_at = NOW
        entry.save()
    RedBeatSchedulerEntry(
        "celery.backend_cleanup", "celery.backend_cleanup", crontab("0", "4", "*"), app=app
    ).save()
    orphan = RedBeatSchedulerEntry("orphan", TASK, schedule(timedelta(minutes=5)), app=app).save()
    get_redis(app).zrem(app.redbeat_conf.schedule_key, orphan.key)


@pytest.mark.slow
@pytest.mark.promise("periodic-import-same-occurrences", "periodic-import-skipped-named")
def test_redbeats_entries_are_imported_with_the_times_redbeat_gives_them_for_a_year(
    app: Celery, redbeat_app: Celery, redbeat_server: RedisServer
) -> None:
    save_entries(redbeat_app)
    imported_at = datetime.now(UTC) - timedelta(milliseconds=1)  # the store keeps ms
    done = invoke(app, "periodic", "import", "--redbeat-url", redbeat_server.url, "--json")
    steps = {step["name"]: step for step in json.loads(done.stdout)}
    assert done.exit_code == 1  # some are skipped
    for name, (_, why) in BAD_RULES.items():
        assert steps[name]["outcome"] == "skipped" and why in steps[name]["reason"], name
    assert "all year: so does UTC" in steps["rule-until"]["notes"][0]
    assert "UTC offset 1:00:00 all year: so does Etc/GMT-1" in steps["rule-berlin"]["notes"][0]
    assert "Celery's beat" in steps["celery.backend_cleanup"]["reason"]
    assert "redbeat does not run it" in steps["orphan"]["reason"]
    assert {name for name, step in steps.items() if step["outcome"] == "added"} == {
        "fresh",
        *(name for name, *_ in SAVED),
        *RULES,
    }
    assert "never ran in redbeat" in steps["fresh"]["notes"][0]
    fresh = periodic.get(app, "fresh")
    assert fresh is not None  # one interval after the import
    assert (
        timedelta(0)
        <= fresh.next_runs[0] - imported_at - timedelta(minutes=10)
        < timedelta(seconds=5)
    )

    after, until = datetime.now(UTC), datetime.now(UTC) + YEAR
    zones = {"rule-until": "UTC", "rule-berlin": "Etc/GMT-1"}
    for name in [name for name, *_ in SAVED] + list(RULES):
        info = periodic.get(app, name)
        assert info is not None and info.entry.timezone == zones.get(name, ZONE)
        theirs = RedBeatSchedulerEntry.from_key(
            redbeat_app.redbeat_conf.key_prefix + name, app=redbeat_app
        )
        assert info.entry.enabled is theirs.enabled
        assert list(info.entry.args) == list(theirs.args or ())
        assert dict(info.entry.kwargs) == theirs.kwargs
        assert dict(info.entry.options) == theirs.options
        theirs.schedule.app = redbeat_app
        runs = celery_runs(theirs.schedule, theirs.last_run_at, ZoneInfo(ZONE), after, until)
        assert_same_times(info.entry, runs, after, until)


@pytest.mark.slow
@pytest.mark.promise("periodic-export-import-round-trip")
def test_an_export_loaded_as_redbeat_loads_it_reads_back_as_redbeats_own_entries(
    app: Celery, redbeat_app: Celery, redbeat_server: RedisServer, tmp_path: Path
) -> None:
    """The export's keys, put into Redis as the guide shows, are entries redbeat reads
    (``from_key``) whose next run is our next occurrence (a rule's, for a year), and
    import back to the same entries."""
    for name, every, *_ in SAVED:
        periodic.upsert(app, name, TASK, every)
    for name, rule in OUR_RULES.items():
        periodic.upsert(app, name, TASK, rule)
    path = tmp_path / "redbeat.json"
    assert invoke(app, "periodic", "export", "--format", "redbeat", "-o", str(path)).exit_code == 0
    document = json.loads(path.read_text())
    client = redbeat_server.client()
    for key, fields in document["keys"].items():
        client.hset(key, mapping={"definition": fields["definition"], "meta": fields["meta"]})
        client.zadd(document["schedule_key"], {key: fields["score"]})
    for name, *_ in SAVED:
        ours = periodic.get(app, name)
        entry = RedBeatSchedulerEntry.from_key("redbeat:" + name, app=redbeat_app)
        entry.schedule.app = redbeat_app
        assert ours is not None and entry.enabled is ours.entry.enabled
        now = datetime.now(UTC)
        first = celery_runs(entry.schedule, entry.last_run_at, ZoneInfo(ZONE), now, now + YEAR)[0]
        due = ours.entry.occurrences().after(now)
        assert due is not None and abs(first - due) < timedelta(milliseconds=1), name
    for name in OUR_RULES:
        ours = periodic.get(app, name)
        entry = RedBeatSchedulerEntry.from_key("redbeat:" + name, app=redbeat_app)
        entry.schedule.app = redbeat_app
        assert ours is not None and isinstance(entry.schedule, rrule)
        now = datetime.now(UTC)
        runs = celery_runs(entry.schedule, entry.last_run_at, ZoneInfo(ZONE), now, now + YEAR)
        assert_same_times(ours.entry, runs, now, now + YEAR)
    before = {info.entry.name: info.entry for info in periodic.entries(app)}
    assert invoke(app, "periodic", "clear", "--yes").exit_code == 0
    assert invoke(app, "periodic", "import", "--redbeat-url", redbeat_server.url).exit_code == 0
    after, now = {info.entry.name: info.entry for info in periodic.entries(app)}, datetime.now(UTC)
    assert sorted(after) == sorted(before)
    for name, entry in after.items():
        assert definition(entry) == expected_back("redbeat", before[name]), name
        assert same_times(entry, before[name], now), name
