"""``celery delayq pause``, ``resume`` and ``throttle`` (celery_delayq/cli/pausing.py) through
click's runner, on a real redis-server: what they print, and the holds they leave."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.gates import bucket_of

from ..helpers import invoke

pytestmark = pytest.mark.integration

LIMITED = "tests.flow.limited"


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app(delayq_rate_limits={LIMITED: "2/s"})


def hold_of(app: Celery, key: str | None) -> bytes | None:
    with open_store(app) as store:
        state = store.keys.for_queue("default").gate("s", bucket_of(LIMITED, key))
        found: bytes | None = store.client.hget(state, "hold")
        return found


def test_pause_throttle_and_resume_a_key(app: Celery) -> None:
    app.send_task(LIMITED, headers={"delayq_limit_key": "k"})
    result = invoke(app, "pause", LIMITED, "--key", "k")
    assert result.exit_code == 0, result.output
    # sent without countdown: it waits in its bucket from the publish on
    assert result.stdout == f"{LIMITED} (key k): paused, 1 message(s) waiting\n"
    assert hold_of(app, "k") == b"paused" and hold_of(app, None) is None

    result = invoke(app, "throttle", LIMITED, "30", "--key", "k", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "task": LIMITED,
        "key": "k",
        "paused": True,  # a throttle never shortens a pause
        "until": None,
        "waiting": 1,
    }

    assert invoke(app, "resume", LIMITED, "--key", "k").exit_code == 0
    assert hold_of(app, "k") is None
    result = invoke(app, "throttle", LIMITED, "30", "--key", "k")
    assert result.exit_code == 0, result.output
    assert "(key k): held until 20" in result.stdout
    assert int(hold_of(app, "k") or 0) > 0


def test_pause_and_resume_a_queue(app: Celery) -> None:
    result = invoke(app, "pause", "--queue", "default")
    assert (result.exit_code, result.stdout) == (0, "queue default: paused\n")
    with open_store(app) as store:
        assert store.queue_paused("default")
    assert invoke(app, "resume", "-Q", "default").stdout == "queue default: resumed\n"
    assert invoke(app, "resume", "-Q", "default").stdout == "queue default: was not paused\n"
    with open_store(app) as store:
        assert not store.queue_paused("default")


def test_a_task_without_limits_is_held_with_a_warning(app: Celery) -> None:
    result = invoke(app, "pause", "no.such.task")
    assert result.exit_code == 0
    assert "warning: no.such.task has no rate or concurrency limit" in result.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["pause"], "give a task name or --queue"),
        (["pause", LIMITED, "--queue", "default"], "give a task name or --queue"),
        (["throttle", LIMITED, "-1"], "-1"),
        (["throttle", LIMITED, "nan"], "nan"),
        (["throttle", LIMITED, "9999999999"], "9999999999"),
        (["pause", f"{LIMITED}\x00k"], "not a task name"),
        (["resume", LIMITED, "--key", "k" * 513], "a limit key is at most 512 bytes"),
    ],
)
def test_refused_commands(app: Celery, args: list[str], why: str) -> None:
    result = invoke(app, *args)
    assert result.exit_code == 2
    assert why in result.stderr
