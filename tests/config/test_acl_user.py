"""Everything runs as the ACL user of the Redis production guide (the line
tools/acl_rules.py generates): a worker and its mover, beat with celery_delayq's scheduler,
the periodic API, the CLI, ``doctor`` and the dashboard, against a real redis-server that
has only that user for the app. Redis refuses it nothing (its ACL LOG stays empty)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest
import redis
from celery import Celery

from celery_delayq import periodic
from celery_delayq.testing import RedisServer, wait_until
from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access
from tools.acl_rules import NOT_GRANTED

from ..acl import acl_redis
from ..helpers import celery_process, invoke, remember, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

TICK = "tests.worker_app.tick"
SETTINGS: dict[str, Any] = {
    "broker_transport_options": {"global_keyprefix": "app1:"},
    "beat_schedule": {"tick": {"task": TICK, "schedule": 1.0}},
}
#: Refusals that are expected and handled: what the user is deliberately not granted, and
#: CLIENT SETINFO, which redis-py sends on connect and ignores the failure of. Redis 6.2
#: logs them without their subcommand.
EXPECTED_DENIALS = {*NOT_GRANTED, "client|setinfo"}
EXPECTED_DENIALS |= {name.split("|")[0] for name in EXPECTED_DENIALS}


@pytest.fixture
def locked_down() -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A Redis set up as the guide recommends (AOF on), locked down as it says."""
    with acl_redis("--appendfsync", "everysec", appendonly=True) as found:
        yield found


def app1_url(server: RedisServer) -> str:
    return f"redis://app1:secret@127.0.0.1:{server.port}/0"


def denials(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """What Redis refused user app1 (ACL LOG): (reason, object, command)."""
    entries: Any = admin.acl_log(count=1000)
    return [
        (entry["reason"], entry["object"], entry["client-info"]["cmd"])
        for entry in entries
        if entry["username"] == "app1" and entry["object"] not in EXPECTED_DENIALS
    ]


def cli(app: Celery, *args: str, code: int = 0) -> str:
    """``celery delayq <args>`` as the app's user; its output, once it exited ``code``."""
    result = invoke(app, *args)
    assert result.exit_code == code, (args, result.output)
    return result.output


def ticks(client: redis.Redis) -> list[dict[str, Any]]:
    return [run for run in runs(client) if run.get("entry") == "tick"]


def use_the_dashboard(app: Celery, task_id: str) -> None:
    """Every page, and a reschedule and a periodic pause and resume through its forms."""
    client = create_app(app, access=Access(), warn_without_credentials=False).test_client()
    pages = ("/", "/scheduled", "/dead", "/doctor", "/periodic", "/periodic/history?name=tick")
    for path in (*pages, f"/task/{task_id}"):
        assert client.get(path).status_code == 200, path
    body = client.get("/scheduled").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', body).group(1)  # type: ignore[union-attr]
    form = {"csrf_token": token, "confirmed": "yes"}
    moved = client.post("/actions/reschedule", data={**form, "ids": [task_id], "eta": "2h"})
    assert moved.status_code == 302
    for verb in ("pause", "resume"):
        assert client.post(f"/periodic/{verb}", data={**form, "ids": ["tick"]}).status_code == 302
    assert client.post("/doctor", data=form).status_code == 302  # the full check


@pytest.mark.slow
@pytest.mark.promise("acl-line-runs-everything")
def test_a_worker_beat_the_periodic_api_the_cli_doctor_and_the_dashboard_run_as_the_guides_acl_user(
    make_app: Callable[..., Celery],
    locked_down: tuple[RedisServer, redis.Redis],
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    server, admin = locked_down
    url = app1_url(server)
    app = make_app(url=url, **SETTINGS)
    with ExitStack() as stack:
        stack.enter_context(
            celery_process("worker", url, SETTINGS, "-P", "solo", record_url=redis_server.url)
        )
        beat = ("beat", url, SETTINGS, "-S", "delayq", "--pidfile=")
        stack.enter_context(celery_process(*beat, ready="beat: Starting"))
        wait_until(lambda: len(ticks(redis_client)) >= 2, timeout=30)  # beat wrote ahead

        # The periodic API, then the CLI's periodic commands.
        with pytest.warns(periodic.UnknownTaskWarning):  # the worker knows the task
            periodic.upsert(app, "api", TICK, 60.0)
        periodic.pause(app, "api")
        periodic.resume(app, "api")
        periodic.run_now(app, "api")
        assert {info.entry.name for info in periodic.entries(app)} >= {"tick", "api"}
        wait_until(lambda: any(r.get("entry") == "api" for r in runs(redis_client)), timeout=15)
        assert periodic.remove(app, "api")
        listed = {e["name"]: e for e in json.loads(cli(app, "periodic", "list", "--json"))}
        assert "api" not in listed and listed["tick"]["next_runs"]
        with pytest.warns(periodic.UnknownTaskWarning):
            cli(app, "periodic", "add", "cli", "--task", TICK, "--every", "60")
        for verb in ("show", "pause", "resume", "run", "remove", "history"):
            cli(app, "periodic", verb, "cli")
        changed = [getattr(each, "action", None) for each in periodic.changes(app, "api")]
        assert changed == ["removed", "ran now", "resumed", "paused", "created"]

        # Delayed tasks through the CLI.
        pending = remember(app, "pending", countdown=600)
        cancelled = remember(app, "cancelled", countdown=600)
        promoted = remember(app, "promoted", countdown=600)
        cli(app, "status")
        assert pending.id in cli(app, "list", "--task", "tests.worker_app.remember")
        cli(app, "show", pending.id)
        cli(app, "reschedule", pending.id, "--countdown", "900")
        cli(app, "cancel", cancelled.id)
        cli(app, "promote", promoted.id)
        wait_until(lambda: promoted.id in {r["id"] for r in runs(redis_client)}, timeout=15)
        cli(app, "promote", "--all-due")
        cli(app, "list", "--dead")
        cli(app, "dead", "resend", "--all")
        cli(app, "dead", "drop", "--all", "--yes")
        cli(app, "doctor")  # passes: AOF on, read from INFO
        use_the_dashboard(app, pending.id)
        cli(app, "purge", "--yes")
        after_purge = len(ticks(redis_client))
        wait_until(lambda: len(ticks(redis_client)) >= after_purge + 2, timeout=15)

    assert denials(admin) == [], "Redis refused app1 something it needs"
    keys: Any = admin.keys("*")
    assert {key.split(b":")[0] for key in keys} == {b"app1"}


def persistence(app: Celery, *options: str) -> tuple[int, dict[str, Any]]:
    """``doctor``'s exit status and its persistence finding."""
    result = invoke(app, "doctor", "--json", *options)
    findings = {f["check"]: f for f in json.loads(result.stdout)["findings"]}
    return result.exit_code, findings["persistence"]


@pytest.mark.promise("doctor-fails-unconfirmed-persistence")
def test_doctor_as_the_acl_user_fails_where_it_cannot_confirm_persistence_and_says_how_to_allow_it(
    make_app: Callable[..., Celery],
) -> None:
    """AOF off and ``save ""``: the user may not read ``save``, so doctor cannot tell
    RDB snapshots from no persistence at all."""
    with acl_redis(appendonly=False) as (server, admin):
        app = make_app(url=app1_url(server), **SETTINGS)

        code, finding = persistence(app)
        assert (code, finding["level"]) == (1, "fail")
        assert "persistence cannot be confirmed" in finding["message"]
        assert "appendonly yes" in finding["fix"]
        assert "+config|get" in finding["fix"]
        assert "--persistence-confirmed" in finding["fix"]

        code, finding = persistence(app, "--persistence-confirmed")
        assert (code, finding["level"]) == (0, "ok")
        assert finding["message"].endswith("confirmed by the operator")

        # Allowed to read it, doctor finds there is no persistence, whatever it is told.
        admin.execute_command("ACL", "SETUSER", "app1", "+config|get")
        for options in ((), ("--persistence-confirmed",)):
            code, finding = persistence(app, *options)
            assert (code, finding["level"]) == (1, "fail")
            assert finding["message"].startswith("no persistence")

        admin.config_set("appendonly", "yes")  # as the guide says
        wait_until(lambda: admin.info("persistence")["aof_rewrite_in_progress"] == 0)
        assert persistence(app)[1]["level"] in ("ok", "warn")
