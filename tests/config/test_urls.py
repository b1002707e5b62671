"""Multi-node URLs (issue 25, findings 2, 5 and the exporter's bind in 11).

- Celery's ``;``-separated failover forms (Redis, Sentinel, AMQP) and the Redis Cluster guide's
  form ``redis+cluster://a:7000,b:7000/0`` start every process: worker, beat, mover,
  status, doctor and the dashboard, against real servers.
- No password of any URL part appears in anything a user reads: every command's output,
  the start-up logs of worker, beat and mover, and every dashboard page.
- The metrics exporter listens on this host only unless told otherwise.
"""

from __future__ import annotations

import re
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from hypothesis import given
from hypothesis import strategies as st

from celery_delayq.cli import delayq
from celery_delayq.config.errors import ConfigurationError
from celery_delayq.config.settings import DelayqConfig
from celery_delayq.core.urls import sanitize_url
from celery_delayq.testing import RedisServer, free_port, sentinels, wait_until

from ..helpers import NOWHERE, celery_process, fetch_metrics, invoke, remember, runs

pytestmark = pytest.mark.adversarial

CLUSTER_FORM = "redis+cluster://a:7000,b:7000/0"
SENTINELS = "sentinel://:s1@h1:26379;sentinel://:s2@h2:26379/0"
AMQP_FAILOVER = "amqp://u:p1@h1//;amqp://u:p2@h2//"


def closed_port() -> int:
    """A local port nothing listens on: the unreachable second host of a failover URL."""
    port = free_port()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    return port


# -- the helper every URL goes through ----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (CLUSTER_FORM, CLUSTER_FORM),
        ("redis+cluster://u:pw@a:7000,b:7000/0", "redis+cluster://u:**@a:7000,b:7000/0"),
        (SENTINELS, "sentinel://:**@h1:26379;sentinel://:**@h2:26379/0"),
        (AMQP_FAILOVER, "amqp://u:**@h1//;amqp://u:**@h2//"),
        ("redis://:pw@h:6379/0", "redis://:**@h:6379/0"),
        ("redis://h/0?db=1&password=pw", "redis://h/0?db=1&password=**"),
        (
            "sentinel://h:26379/0?sentinel_kwargs=%7B%22password%22%3A%22pw%22%7D",
            "sentinel://h:26379/0?sentinel_kwargs=**",
        ),
        ("unix://:pw@/run/redis.sock?db=0", "unix://:**@/run/redis.sock?db=0"),
        ("redis://:pw@[::1]:6379/0", "redis://:**@[::1]:6379/0"),
        ("redis+cluster://u:p1@a:7000,u:p2@b:7000/0", "redis+cluster://**@a:7000,**@b:7000/0"),
        ("redis://user@h/0", "redis://user@h/0"),
        (["amqp://u:p1@h1//", "amqp://u:p2@h2//"], "amqp://u:**@h1//;amqp://u:**@h2//"),
        ("redis://:pa/ss@h/0", "redis://**"),  # unescaped "/" in a password: all masked
        ("redis://h/0?password=a@b", "redis://**"),
        ("amqp://u:p;q@h//", "amqp://**;**@h//"),  # unescaped ";": both halves masked
        ("memory://", "memory://"),
    ],
)
def test_every_part_of_a_url_is_shown_with_its_passwords_masked(url: Any, shown: str) -> None:
    assert sanitize_url(url) == shown


SECRET = st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1).map(
    lambda text: "PW" + text
)
FORMS = st.sampled_from(
    [
        "redis://:{p}@h:6379/0",
        "redis://user:{p}@h:6379/0;redis://user:{p}@g:6379/0",
        "redis+cluster://u:{p}@a:7000,b:7000/0",
        "redis+cluster://u:{p}@a:7000,v:{p}@b:7000/0",
        "sentinel://:{p}@h1:26379;sentinel://:{p}@h2:26379/0",
        "amqp://u:{p}@h1//;amqp://u:{p}@h2//",
        "redis://h:6379/0?password={p}",
        "unix://:{p}@/run/redis.sock",
    ]
)


@given(FORMS, SECRET)
def test_no_password_survives_sanitizing_whatever_its_characters(form: str, secret: str) -> None:
    assert secret not in sanitize_url(form.format(p=secret))


@given(st.text())
def test_sanitizing_never_raises(text: str) -> None:
    assert isinstance(sanitize_url(text), str)


# -- settings: the multi-node forms validate -------------------------------------------------


@pytest.mark.parametrize(
    ("store_url", "master"),
    [
        (CLUSTER_FORM, None),
        ("rediss+cluster://u:pw@a:7000,b:7000", None),
        ("sentinel://h1:26379;sentinel://h2:26379/0", "mymaster"),
        ("sentinel://:pw@h1:26379;sentinel://:pw@h2:26379", "mymaster"),
    ],
)
def test_multi_node_store_urls_are_valid_settings(store_url: str, master: str | None) -> None:
    config = DelayqConfig(store_url=store_url, store_master_name=master)
    assert config.store_url == store_url


def test_a_refused_multi_node_url_is_named_without_its_passwords() -> None:
    with pytest.raises(ConfigurationError) as refused:
        DelayqConfig(store_url="redis+cluster://u:SECRET-a@a:7000,b:7000/3")
    assert "database 0 only" in str(refused.value)
    assert "SECRET" not in str(refused.value)
    with pytest.raises(ConfigurationError) as refused:
        DelayqConfig(store_url="mongodb://u:SECRET-b@a:1,b:2;mongodb://u:SECRET-c@c:3")
    assert "SECRET" not in str(refused.value)


@pytest.mark.promise("services-listen-on-loopback", "exporter-loopback-unless-told")
def test_the_metrics_exporter_listens_on_this_host_only_unless_told_otherwise(
    app_factory: Any,
) -> None:
    pytest.importorskip("prometheus_client")
    from celery_delayq.metrics import start_configured_exporter, start_exporter

    port = free_port()
    server = start_configured_exporter(app_factory(delayq_metrics_port=port))
    assert server is not None
    try:
        assert server.server_address[:2] == ("127.0.0.1", port)
    finally:
        server.shutdown()
    server, _ = start_exporter(app_factory(), free_port())
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
    server = start_configured_exporter(
        app_factory(delayq_metrics_port=free_port(), delayq_metrics_addr="0.0.0.0")
    )
    assert server is not None
    try:
        assert server.server_address[0] == "0.0.0.0"
    finally:
        server.shutdown()


@pytest.mark.slow
@pytest.mark.promise("services-listen-on-loopback", "exporter-loopback-unless-told")
def test_the_exporter_command_follows_the_setting_and_its_option() -> None:
    port = free_port()
    with celery_process(
        "delayq",
        NOWHERE,
        None,
        *exporter_args(port),
        ready=f"serving http://127.0.0.1:{port}/metrics",
        log_level=None,
    ):
        assert answers("127.0.0.1", port)
    settings = {"delayq_metrics_addr": "127.0.0.2"}
    for args, addr, other in (
        ([], "127.0.0.2", "127.0.0.1"),
        (["--addr", "127.0.0.1"], "127.0.0.1", "127.0.0.2"),
    ):
        port = free_port()
        with celery_process(
            "delayq",
            NOWHERE,
            settings,
            *exporter_args(port),
            *args,
            ready=f"serving http://{addr}:{port}/metrics",
            log_level=None,
        ):
            assert answers(addr, port)
            assert not answers(other, port), "it listens on more than the address it names"


def exporter_args(port: int) -> list[str]:
    return ["exporter", "--port", str(port)]


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=5):
            return True
    except OSError:
        return False


# -- every process starts with a multi-node URL ------------------------------------------


def every_process_starts(
    app: Celery, broker_url: str, settings: dict[str, Any], record: RedisServer
) -> None:
    """A delayed task published by ``app`` runs on a worker; beat and a standalone mover
    start and log where the store is; status and doctor answer; the dashboard starts
    and its overview answers."""
    sent = remember(app, "multi-node", countdown=0.5)  # the first publish sets up a channel
    worker = celery_process("worker", broker_url, settings, "-P", "solo", record_url=record.url)
    with worker as process:
        wait_until(lambda: runs(record.client()), timeout=30, abort=process.exited)
    assert "celery-delayq: delayed tasks in" in process.output
    assert [run["id"] for run in runs(record.client())] == [sent.id]
    with celery_process("beat", broker_url, settings, "-S", "delayq", ready="beat: Starting"):
        pass
    with celery_process(
        "delayq", broker_url, settings, "mover", ready="standalone mover running", log_level=None
    ) as mover:
        pass
    assert "celery-delayq: delayed tasks in" in mover.output
    status = invoke(app, "status")
    assert status.exit_code == 0 and "store: " in status.output, status.output
    doctor = invoke(app, "doctor")  # exits 1 here (test servers keep nothing on disk)
    assert isinstance(doctor.exception, (SystemExit, type(None))), doctor.output
    assert "[ok  ] clock skew" in doctor.output, doctor.output
    pytest.importorskip("flask")
    web = ["web", "--port", str(free_port())]
    with celery_process(
        "delayq", broker_url, settings, *web, ready="serving http://", log_level=None
    ):
        pass
    from celery_delayq.web import create_app
    from celery_delayq.web.guard.access import Access

    page = create_app(app, access=Access()).test_client().get("/")
    assert page.status_code == 200, page.get_data(as_text=True)


@pytest.mark.slow
def test_the_readme_cluster_form_with_several_nodes_starts_every_process(
    make_app: Any,
    redis_cluster: Any,
    cluster_store_url: str,
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    nodes = ",".join(f"{host}:{port}" for host, port in redis_cluster.startup_nodes)
    settings = {"delayq_store_url": f"redis+cluster://{nodes}/0"}
    every_process_starts(make_app(**settings), redis_server.url, settings, redis_server)


@pytest.fixture
def two_sentinels(tmp_path: Path) -> Iterator[tuple[RedisServer, list[int]]]:
    """A master and two sentinels, each monitoring it as ``mymaster``."""
    with RedisServer() as master, sentinels(master, tmp_path, count=2) as ports:
        yield master, ports


@pytest.mark.slow
def test_a_broker_behind_several_sentinels_starts_every_process(
    app_factory: Any, two_sentinels: tuple[RedisServer, list[int]]
) -> None:
    master, ports = two_sentinels
    # Celery's form: no database after each sentinel (db 0)
    url = ";".join(f"sentinel://127.0.0.1:{port}" for port in [*ports, closed_port()])
    settings = {
        "broker_transport": "celery_delayq.transport:SentinelTransport",
        "broker_transport_options": {"master_name": "mymaster"},
    }
    app = app_factory(url, **settings)
    every_process_starts(app, url, settings, master)
    sentinels = ",".join(f"127.0.0.1:{port}" for port in url_ports(url))
    assert f"store: sentinel://{sentinels}/0 (master mymaster)" in invoke(app, "status").output


@pytest.mark.slow
def test_a_store_behind_several_sentinels_starts_every_process(
    make_app: Any,
    two_sentinels: tuple[RedisServer, list[int]],
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> None:
    _, ports = two_sentinels
    store = ";".join(f"sentinel://127.0.0.1:{port}" for port in ports)
    settings = {"delayq_store_url": store, "delayq_store_master_name": "mymaster"}
    app = make_app(**settings)
    every_process_starts(app, redis_server.url, settings, redis_server)
    sentinels = ",".join(f"127.0.0.1:{port}" for port in ports)
    assert f"store: sentinel://{sentinels}/0 (master mymaster)" in invoke(app, "status").output


def url_ports(url: str) -> list[int]:
    return [int(port) for port in re.findall(r":(\d+)", url)]


@pytest.mark.slow
def test_an_amqp_failover_broker_url_starts_every_process(
    app_factory: Any, rabbitmq_url: str, amqp_settings: dict[str, Any], redis_server: RedisServer
) -> None:
    """The second broker is a closed local port: kombu fails over to it only if the
    first is down, and every process must start with the URL as written."""
    url = f"{rabbitmq_url};amqp://guest:guest@127.0.0.1:{closed_port()}//"
    every_process_starts(app_factory(url, **amqp_settings), url, amqp_settings, redis_server)


# -- no password in anything a user reads --------------------------------------------------

PASSWORDS = {
    "broker": "PW-broker-one",
    "failover broker": "PW-broker-two",
    "result backend": "PW-results",
    "store": "PW-store-query",
}

#: Every command of ``celery delayq --help`` run in this process, with the arguments of
#: each run ("ID": the id of a pending task); the long-running ones run as processes.
IN_PROCESS = {
    "status": [["status"], ["status", "--json", "--timeline"]],
    "doctor": [["doctor"], ["doctor", "--json"]],
    "list": [["list"], ["list", "--json"], ["list", "--dead"]],
    "show": [["show", "ID"], ["show", "--json", "ID"]],
    "reschedule": [["reschedule", "ID", "--countdown", "7200"]],
    "promote": [["promote", "no-such-task"]],
    "cancel": [["cancel", "no-such-task"]],
    "dead": [["dead", "resend", "--all"], ["dead", "drop", "--all", "--yes"]],
    "rescue": [["rescue", "--yes"]],
    "purge": [["purge", "--yes"]],
    "periodic": [
        ["periodic", "add", "guarded", "--task", "tests.worker_app.tick", "--every", "60"],
        ["periodic", "list"],
        ["periodic", "show", "--json", "guarded"],
        ["periodic", "run", "guarded"],
        ["periodic", "remove", "guarded"],
    ],
    "limits": [["limits"], ["limits", "--json"]],
    "pause": [["pause", "tests.worker_app.limited"], ["pause", "--queue", "default"]],
    "resume": [["resume", "tests.worker_app.limited"], ["resume", "--queue", "default"]],
    "throttle": [["throttle", "tests.worker_app.limited", "5", "--json"]],
}
AS_PROCESSES = {"mover", "exporter", "web"}


@pytest.fixture
def guarded_servers() -> Iterator[tuple[RedisServer, RedisServer]]:
    """A broker Redis with a password and an ACL user for results, and a store Redis
    with a password of its own."""
    with RedisServer() as broker, RedisServer() as store:
        with broker.client() as client:
            client.acl_setuser(
                "results",
                enabled=True,
                passwords=[f"+{PASSWORDS['result backend']}"],
                keys=["*"],
                channels=["*"],
                commands=["+@all"],
            )
            client.config_set("requirepass", PASSWORDS["broker"])
        with store.client() as client:
            client.config_set("requirepass", PASSWORDS["store"])
        yield broker, store


def assert_no_password(where: str, text: str) -> None:
    for part, password in PASSWORDS.items():
        assert password not in text, f"the {part}'s password is shown by {where}:\n{text}"


def guarded_config(
    form: str, broker: RedisServer, store: RedisServer, amqp_url: str | None
) -> tuple[str, dict[str, Any], str]:
    """Broker URL, settings and the store's URL as shown, for one form: a Redis failover
    broker holding the store, one with a store of its own (a password in the query), or
    an AMQP failover broker (its second host a closed port) with a store."""
    failover = f"{PASSWORDS['failover broker']}@127.0.0.1:{closed_port()}"
    results = f"redis://results:{PASSWORDS['result backend']}@127.0.0.1:{broker.port}/1"
    broker_url = f"redis://:{PASSWORDS['broker']}@127.0.0.1:{broker.port}/0;redis://:{failover}/0"
    settings: dict[str, Any] = {"result_backend": results}
    shown_store = f"redis://:**@127.0.0.1:{broker.port}/0;redis://:**@127.0.0.1:"
    if form == "store of its own":
        settings["delayq_store_url"] = (
            f"redis://127.0.0.1:{store.port}/0?password={PASSWORDS['store']}"
        )
        shown_store = f"redis://127.0.0.1:{store.port}/0?password=**"
    if form == "amqp":
        assert amqp_url is not None
        broker_url = f"{amqp_url};amqp://guest:{failover}//"
        settings.update(
            broker_transport="celery_delayq.transport:AMQPTransport",
            task_default_queue=f"q-{uuid.uuid4().hex[:8]}",
            delayq_store_url=f"redis://:{PASSWORDS['store']}@127.0.0.1:{store.port}/0",
        )
        shown_store = f"redis://:**@127.0.0.1:{store.port}/0"
    return broker_url, settings, shown_store


@pytest.mark.slow
@pytest.mark.parametrize("form", ["store in the broker", "store of its own", "amqp"])
@pytest.mark.promise("urls-shown-without-passwords")
def test_no_password_of_any_url_part_is_shown_by_a_command_a_log_or_a_page(
    request: pytest.FixtureRequest,
    app_factory: Any,
    guarded_servers: tuple[RedisServer, RedisServer],
    form: str,
) -> None:
    amqp_url = request.getfixturevalue("rabbitmq_url") if form == "amqp" else None
    broker_url, settings, shown_store = guarded_config(form, *guarded_servers, amqp_url)
    app = app_factory(broker_url, **settings)
    task_id = remember(app, "guarded", countdown=3600).id

    shown = {
        **process_outputs(broker_url, settings),
        **page_outputs(app, task_id),
        **command_outputs(app, task_id),
    }

    for process in ("celery worker", "celery beat -S delayq", "celery delayq mover"):
        assert f"delayed tasks in {shown_store}" in shown[process], shown[process]
    assert task_id in shown["celery delayq show ID"]
    assert re.search(r"store: redis://:\*\*@127.0.0.1:\d+/0\n", shown["celery delayq status"])
    if form != "store in the broker":  # then doctor checks the broker too: both parts
        assert re.search(
            r"broker: .*:\*\*@127.0.0.1.*;.*:\*\*@127.0.0.1", shown["celery delayq doctor"]
        )
    for where, text in shown.items():
        assert_no_password(where, text)


def process_outputs(broker_url: str, settings: dict[str, Any]) -> dict[str, str]:
    """The logs of worker, beat and every long-running command, and the metrics."""
    shown = {}
    for command, args, ready in (
        ("worker", ["-P", "solo"], "ready."),
        ("beat", ["-S", "delayq"], "beat: Starting"),
        ("delayq", ["mover"], "standalone mover running"),
    ):
        level = None if command == "delayq" else "info"
        with celery_process(
            command, broker_url, settings, *args, ready=ready, log_level=level
        ) as process:
            process.wait_for_output("celery-delayq: delayed tasks in")
        shown[f"celery {command} {' '.join(args)}".replace(" -P solo", "")] = process.output
    port = free_port()
    with celery_process(
        "delayq",
        broker_url,
        settings,
        "exporter",
        "--port",
        str(port),
        ready="/metrics",
        log_level=None,
    ) as process:
        shown["/metrics"] = fetch_metrics(port)
    shown["celery delayq exporter"] = process.output
    web = ["web", "--port", str(free_port())]
    with celery_process(
        "delayq", broker_url, settings, *web, ready="serving http://", log_level=None
    ) as process:
        pass
    shown["celery delayq web"] = process.output
    return shown


def page_outputs(app: Celery, task_id: str) -> dict[str, str]:
    """Every page of the dashboard, rendered for real (Flask's test client)."""
    pytest.importorskip("flask")
    from celery_delayq.web import create_app
    from celery_delayq.web.guard.access import Access

    client = create_app(app, access=Access()).test_client()
    shown = {}
    for path in ("/", "/scheduled", f"/task/{task_id}", "/dead", "/doctor", "/login"):
        page = client.get(path)
        assert page.status_code == 200, (path, page.status_code)
        shown[f"the page {path}"] = page.get_data(as_text=True)
    return shown


def command_outputs(app: Celery, task_id: str) -> dict[str, str]:
    """What every other command of ``celery delayq --help`` prints."""
    assert set(delayq.commands) == set(IN_PROCESS) | AS_PROCESSES, "a command is untested"
    shown = {}
    for runs_of_command in IN_PROCESS.values():
        for args in runs_of_command:
            result = invoke(app, *(task_id if arg == "ID" else arg for arg in args))
            assert "Traceback" not in result.output
            shown[f"celery delayq {' '.join(args)}"] = result.output
    return shown
