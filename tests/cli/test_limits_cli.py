"""``celery delayq limits`` and the flow-control part of ``status``, against a real Redis
and messages published through a real app under its limits, released by the real move."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from celery_delayq.brokers.connect import open_store

from ..helpers import invoke, publish_limited

pytestmark = pytest.mark.integration

SEND, RUN = "tests.send", "tests.run"
HOSTILE = "cust-\x1b[2J\x1b[31m<b>"  # a limit key that would clear the screen, raw


def test_limits_lists_the_buckets_most_waiting_first_with_totals(make_app: Any) -> None:
    app = make_app(delayq_rate_limits={SEND: "1/m"}, delayq_concurrency_limits={RUN: 2})
    publish_limited(app, SEND, 5, key=HOSTILE)
    publish_limited(app, SEND, 2, key="small")
    publish_limited(app, RUN, 4)
    with open_store(app) as store:
        store.move_all_due()  # one of each rate bucket released, two slots of RUN taken

    data = json.loads(invoke(app, "limits", "--json").output)

    assert {k: data[k] for k in ("buckets", "waiting", "running", "throttled", "held")} == {
        "buckets": 3,
        "waiting": 4 + 1 + 2,
        "running": 2,
        "throttled": 3,  # 1/m: the next one a minute on; RUN: both slots taken
        "held": 0,
    }
    rows = [(b["task"], b["key"], b["waiting"], b["released"], b["running"]) for b in data["shown"]]
    assert rows == [(SEND, HOSTILE, 4, 1, 0), (RUN, None, 2, 2, 2), (SEND, "small", 1, 1, 0)]
    first = data["shown"][0]
    assert first["limits"] == "1/m"
    assert first["released_in_window"] == [{"rate": "1/m", "released": 1, "at_least": False}]

    human = invoke(app, "limits", "--top", "1").output
    lines = human.splitlines()
    assert "\x1b" not in human
    *cells, state = re.split(r"\s{2,}", lines[2])
    assert cells == ["default", SEND, "cust-\\x1b[2J\\x1b[31m<b>", "1/m", "4", "1 in 1m", "-"]
    assert state.startswith("throttled for ")
    assert lines[-1] == (
        "3 bucket(s): 7 waiting, 2 running, 3 throttled, 0 paused or held "
        "(the 1 with the most waiting shown)"
    )
    only = json.loads(invoke(app, "limits", "--json", "--task", RUN, "--queue", "default").output)
    assert [b["task"] for b in only["shown"]] == [RUN] and only["buckets"] == 1
    assert json.loads(invoke(app, "limits", "--json", "--queue", "other").output)["buckets"] == 0
    assert invoke(app, "limits", "--queue", "other").output.strip() == "no flow-controlled messages"


def test_status_adds_up_flow_control_per_task(make_app: Any) -> None:
    app = make_app(delayq_rate_limits={SEND: "1/m"})
    for key in ("a", "b", "c"):
        publish_limited(app, SEND, 3, key=key)
    publish_limited(app, SEND, 1)
    with open_store(app) as store:
        store.move_all_due()

    data = json.loads(invoke(app, "status", "--json").output)

    assert data["flow_control"] == [
        {
            "queue": "default",
            "task": SEND,
            "buckets": 4,
            "keyed": 3,
            "waiting": 6,
            "released": 4,
            "running": 0,
            "held": 0,
            "throttled": 3,  # the task's own bucket has nothing left waiting
        }
    ]
    human = invoke(app, "status").output
    row = next(line for line in human.splitlines() if line.startswith("default  tests.send"))
    assert row.split() == ["default", SEND, "4", "(3", "keyed)", "6", "4", "0", "3", "0"]


def test_status_without_flow_control_shows_no_such_part(app: Any) -> None:
    assert "flow-controlled task" not in invoke(app, "status").output
