"""``celery delayq periodic ...`` against a real Redis (the commands run in-process)."""

from __future__ import annotations

import json

import pytest

from ..helpers import invoke

TASK = "tests.periodic.tick"


@pytest.fixture
def app(make_app):
    app = make_app()

    @app.task(name=TASK, shared=False)
    def tick() -> None:
        """The entries' task."""

    return app


def test_add_list_show_pause_resume_run_and_remove(app) -> None:
    added = invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "60", "--json")
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout)["added"] is True
    cron = ["periodic", "add", "nightly", "--task", TASK, "--crontab", "30 2 * * *"]
    assert invoke(app, *cron, "--timezone", "Europe/Berlin").exit_code == 0

    listed = json.loads(invoke(app, "periodic", "list", "--json").stdout)
    assert [e["name"] for e in listed] == ["nightly", "tick"]
    assert listed[0]["schedule"]["crontab"]["hour"] == "2"
    table = invoke(app, "periodic", "list").stdout
    assert "crontab 30 2 * * *" in table and "every 60 s" in table

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
        (["--every", "60", "--crontab", "* * * * *"], "--every or --crontab"),
        ([], "--every or --crontab"),
        (["--crontab", "* * *"], "five fields"),
        (["--crontab", "61 * * * *"], "61"),
        (["--every", "60", "--timezone", "Moon/Base"], "time zone"),
        (["--every", "60", "--args", "{not json"], "not JSON"),
        (["--every", "60", "--kwargs", "[1]"], "a JSON dict"),
        (["--every", "0"], "positive"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(app, args, says) -> None:
    result = invoke(app, "periodic", "add", "x", "--task", TASK, *args)
    assert result.exit_code != 0 and says in result.output, result.output
    assert invoke(app, "periodic", "list", "--json").stdout.strip() == "[]"


def test_show_and_pause_of_an_unknown_entry_say_so(app) -> None:
    for command in ("show", "pause", "resume", "run"):
        result = invoke(app, "periodic", command, "nothing-here")
        assert result.exit_code == 1 and "nothing-here" in result.output
