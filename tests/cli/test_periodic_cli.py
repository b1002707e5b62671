"""``celery delayq periodic ...`` against a real Redis (the commands run in-process)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.periodic.writer import OccurrenceWriter

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import invoke

pytestmark = pytest.mark.integration


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def test_add_list_show_pause_resume_run_and_remove(app) -> None:
    added = invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "60", "--json")
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["added"] is True
    cron = ["periodic", "add", "nightly", "--task", TASK, "--crontab", "30 2 * * *"]
    assert invoke(app, *cron, "--timezone", "Europe/Berlin", "--overlap", "skip").exit_code == 0

    listed = json.loads(invoke(app, "periodic", "list", "--json").stdout)
    assert [e["name"] for e in listed] == ["nightly", "tick"]
    assert listed[0]["schedule"]["crontab"]["hour"] == "2"
    table = invoke(app, "periodic", "list").stdout
    assert "crontab 30 2 * * *" in table and "every 1 minute" in table
    assert (listed[0]["overlap"], listed[1]["overlap"]) == ("skip", "allow")
    assert "no overlap" in table

    shown = json.loads(invoke(app, "periodic", "show", "tick", "--json").stdout)
    assert len(shown["next_runs"]) == 3 and shown["origin"] == "api"
    assert invoke(app, "periodic", "pause", "tick").exit_code == 0
    assert json.loads(invoke(app, "periodic", "show", "tick", "--json").stdout)["enabled"] is False
    assert invoke(app, "periodic", "resume", "tick").exit_code == 0
    sent = json.loads(invoke(app, "periodic", "run", "tick", "--json").stdout)
    assert sent["task_id"]
    assert invoke(app, "periodic", "remove", "tick").exit_code == 0
    assert invoke(app, "periodic", "remove", "tick").exit_code == 1


@pytest.mark.parametrize(
    "args, says",
    [
        (["--every", "60", "--crontab", "* * * * *"], "give one of --every, --crontab"),
        ([], "give one of --every, --crontab, --rrule, --at"),
        (["--every", "60", "--rrule", "FREQ=DAILY"], "give one of"),
        (["--at", "tomorrow"], "not an ISO 8601 time"),
        (["--at", "2020-01-01T00:00:00Z"], "or has ended"),
        (["--every", "60", "--expires", "2020-01-01T00:00:00+01:00"], "or has ended"),
        (["--every", "60", "--start", "2030-01-01", "--expires", "2029-01-01"], "after start_time"),
        (["--rrule", "FREQ=FORTNIGHTLY"], "RFC 5545"),
        (["--every", "60", "--description", "x" * 1001], "description"),
        (["--crontab", "* * *"], "five fields"),
        (["--crontab", "61 * * * *"], "61"),
        (["--every", "60", "--timezone", "Moon/Base"], "time zone"),
        (["--every", "60", "--args", "{not json"], "not JSON"),
        (["--every", "60", "--kwargs", "[1]"], "a JSON dict"),
        (["--every", "0"], "positive"),
        (["--every", "60", "--options", '{"serializer": "nope"}'], "No encoder installed"),
        (["--every", "60", "--options", '{"queue": 5}'], "refused"),
        (["--crontab", "* 1 31 3 sun", "--timezone", "Antarctica/Troll"], "never fires"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(app, args, says) -> None:
    result = invoke(app, "periodic", "add", "x", "--task", TASK, *args)
    assert result.exit_code != 0 and says in result.output, result.output
    assert invoke(app, "periodic", "list", "--json").stdout.strip() == "[]"


def test_a_crontab_line_is_read_in_crons_order(app) -> None:
    """minute hour day-of-month month day-of-week (Celery's ``crontab()`` takes the day
    of the week third)."""
    line = ["periodic", "add", "monthly", "--task", TASK, "--crontab", "0 9 1 6 mon-fri"]
    assert invoke(app, *line).exit_code == 0
    shown = json.loads(invoke(app, "periodic", "show", "monthly", "--json").stdout)
    assert shown["schedule"]["crontab"] == {
        "minute": "0",
        "hour": "9",
        "day_of_month": "1",
        "month_of_year": "6",
        "day_of_week": "mon-fri",
    }


def test_show_and_pause_of_an_unknown_entry_say_so(app) -> None:
    for command in ("show", "pause", "resume", "run"):
        result = invoke(app, "periodic", command, "nothing-here")
        assert result.exit_code == 1 and "nothing-here" in result.output


def test_list_show_and_status_tell_the_last_run_and_the_missed_occurrences(app) -> None:
    """Every beat down for an hour past a minutely entry's horizon: catch_up "none" skips
    the missed occurrences; a worker recorded a run before."""
    start = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "minutely", "x.y", 60, catch_up="none", now=start)
        periodic.upsert(app, "fine", "x.y", 60, now=start)
    found = periodic.get(app, "minutely")
    assert found is not None
    OccurrenceWriter(app).advance(found.entry, found.version, start + timedelta(minutes=60))
    with open_store(app) as store:
        EntryHistory(store.client, store.keys).ran("minutely", start, start)

    listed = json.loads(invoke(app, "periodic", "list", "--json").stdout)
    minutely = next(e for e in listed if e["name"] == "minutely")
    assert (minutely["late"], minutely["missed"]) == (0, 55)  # 5 minutes were written
    assert datetime.fromisoformat(minutely["last_run"]) == start
    assert "0/55/0" in invoke(app, "periodic", "list").stdout

    status = json.loads(invoke(app, "status", "--json").stdout)["periodic"]
    assert status == {
        "entries": 2,
        "paused": 0,
        "late": 0,
        "missed": 55,
        "skipped": 0,
        "entries_late_or_missed": [{"name": "minutely", "late": 0, "missed": 55, "skipped": 0}],
        "unreadable": [],
    }
    human = invoke(app, "status").stdout
    assert "periodic entries: 2 (0 paused); occurrences run late: 0, missed: 55" in human

    assert invoke(app, "periodic", "remove", "minutely").exit_code == 0
    status = json.loads(invoke(app, "status", "--json").stdout)["periodic"]
    assert (status["entries"], status["missed"]) == (1, 0)  # its history went with it


@pytest.mark.promise("periodic-one-off-once", "periodic-rrule", "periodic-description")
def test_add_takes_the_entry_model_of_django_celery_beat(app) -> None:
    """--at (a time with no offset is read in --timezone), --one-off, --start, --expires,
    --description and --rrule; show and list give them back, in words too."""
    at = ["--at", "2030-06-01T09:00", "--timezone", "Europe/Berlin", "--description", "launch"]
    assert invoke(app, "periodic", "add", "launch", "--task", TASK, *at).exit_code == 0
    rule = ["--rrule", "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0", "--one-off"]
    window = ["--start", "2030-01-01T00:00:00Z", "--expires", "2030-12-31T00:00:00Z"]
    added = invoke(app, "periodic", "add", "mondays", "--task", TASK, *rule, *window)
    assert added.exit_code == 0, added.output

    launch = json.loads(invoke(app, "periodic", "show", "launch", "--json").stdout)
    assert launch["schedule"] == {"clocked": 1906527600000}  # 07:00 UTC
    assert launch["next_runs"] == ["2030-06-01T07:00:00+00:00"]
    assert (launch["description"], launch["one_off"], launch["total_run_count"]) == (
        "launch",
        False,
        0,
    )
    mondays = json.loads(invoke(app, "periodic", "show", "mondays", "--json").stdout)
    assert mondays["schedule"]["rrule"] == "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0;BYSECOND=0"
    assert (mondays["one_off"], mondays["start_time"], mondays["expires"]) == (
        True,
        "2030-01-01T00:00:00.000+00:00",
        "2030-12-31T00:00:00.000+00:00",
    )
    assert mondays["next_runs"] == ["2030-01-07T09:00:00+00:00"]  # the first Monday only

    table = invoke(app, "periodic", "list").stdout
    assert "once at 2030-06-01 09:00 Europe/Berlin" in table
    assert "every week on Monday at 09:00 (rrule); one-off" in table
    assert "runs" in table.splitlines()[0]
