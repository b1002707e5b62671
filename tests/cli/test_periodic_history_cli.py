"""``celery delayq periodic history`` against a real Redis (in-process): the records of
the CLI's own changes, the limit, and crafted records read, never a crash."""

from __future__ import annotations

import json
import time

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.audit.actors import os_user

from ..helpers import PERIODIC_TASK as TASK
from ..helpers import invoke

pytestmark = pytest.mark.integration


@pytest.fixture
def app(periodic_app: Celery) -> Celery:
    return periodic_app


def history(app: Celery, *args: str) -> list[dict]:
    result = invoke(app, "periodic", "history", "tick", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_cli_records_its_changes_and_history_lists_them(app) -> None:
    assert invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "60").exit_code == 0
    assert invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "90").exit_code == 0
    assert invoke(app, "periodic", "pause", "tick").exit_code == 0
    found = history(app)
    assert [each["action"] for each in found] == ["paused", "updated", "created"]
    assert {(each["who"], each["via"]) for each in found} == {(os_user(), "cli")}
    assert found[1]["changes"]["schedule"][1] == '{"every": 90.0, "relative": false}'
    assert [each["action"] for each in history(app, "--limit", "1")] == ["paused"]
    table = invoke(app, "periodic", "history", "tick").stdout
    assert "when (UTC)" in table and "enabled: true -> false" in table
    assert invoke(app, "periodic", "history", "tick", "--limit", "0").exit_code == 2
    assert "no change of 'other'" in invoke(app, "periodic", "history", "other").stdout


@pytest.mark.promise("periodic-change-log-crafted")
def test_crafted_records_are_listed_as_unreadable(app) -> None:
    assert invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "60").exit_code == 0
    crafted = json.dumps(
        {"at": int(time.time() * 1000), "who": "\x1b[31mevil", "via": "x", "action": "y"}
    )
    with open_store(app) as store:
        key = store.keys.periodic_changes("tick")
        store.client.lpush(key, b"\xff[[[", crafted, b"[" * 100_000)
    found = history(app)
    assert [sorted(each) for each in found[:1]] == [["unreadable"]]
    assert found[-1]["action"] == "created"
    table = invoke(app, "periodic", "history", "tick")
    assert table.exit_code == 0 and "unreadable record" in table.stdout
    assert "\x1b" not in table.stdout and "\\x1b[31mevil" in table.stdout


def test_an_import_and_a_clear_are_recorded_as_such_through_the_cli(app, tmp_path) -> None:
    assert invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "60").exit_code == 0
    saved = tmp_path / "entries.json"
    assert invoke(app, "periodic", "export", "-o", str(saved)).exit_code == 0
    assert invoke(app, "periodic", "add", "tick", "--task", TASK, "--every", "90").exit_code == 0
    imported = invoke(app, "periodic", "import", str(saved))
    assert imported.exit_code == 0, imported.output
    last = history(app)[0]
    assert (last["action"], last["via"]) == ("imported", "cli")
    assert last["changes"]["schedule"][1] == '{"every": 60.0, "relative": false}'
    assert invoke(app, "periodic", "clear", "--yes").exit_code == 0
    last = history(app)[0]
    assert (last["action"], last["via"], last["changes"]["task"]) == (
        "cleared",
        "cli",
        [f'"{TASK}"', None],
    )
