"""Fixtures of every kind of test (helpers that are not fixtures: ``tests.helpers``).

Folders follow the package (``tests/core``, ``tests/brokers/redis``...); each test module
marks its kind (``pytestmark``, markers registered in pyproject.toml):

- ``unit``: no server at all (``app_factory`` builds apps on an unused address); a unit test
  that asks for a server fails (``pytest_runtest_setup`` below).
- ``integration``: a real redis-server (one per session, ``redis_server``), flushed
  before every test that uses it (``redis_client``, ``make_app``, ``app``).
- ``system``: real ``celery worker``, ``beat`` and ``delayq mover`` subprocesses
  (``tests.helpers.celery_process``), Sentinel, TLS, ACL users, kills.
- ``adversarial``: hostile input against real servers and processes.
- Tests on RabbitMQ (``rabbitmq_url``, ``make_amqp_app``) run in the latter kinds.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kombu.pools
import pytest
import redis
from celery import Celery

from celery_delayq.testing import (
    AMQP_TRANSPORT,
    SQS_TRANSPORT,
    RabbitMQUnavailable,
    RedisClusterServers,
    RedisServer,
    build_app,
    free_port,
    rabbitmq_for_tests,
    spawn,
    wait_until,
)

from .helpers import NOWHERE, PERIODIC_TASK

#: The fixtures that start a server: a unit test may ask for none of them.
SERVERS = {"redis_server", "store_server", "redis_cluster", "rabbitmq_url", "sqs_server"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests (marked ``slow``) first, everything else in collection order: under
    pytest-xdist (``-n 2``) a long test dealt out near the end leaves the other process
    idle until it ends. The sort is stable and reads only markers, so every xdist process
    collects the same order. tryfirst: pytest-django's own sort (also tryfirst, registered
    earlier, so it runs after this one) keeps its database tests first, in Django's order."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A unit test runs without any server: asking for one is a mistake in the test (its
    kind is integration), caught here before the server starts."""
    asked = SERVERS.intersection(getattr(item, "fixturenames", ()))
    if item.get_closest_marker("unit") and asked:
        pytest.fail(
            f"a unit test asked for a server ({', '.join(sorted(asked))}): mark it integration"
        )


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on a freshly flushed server (data and scripts): whatever ran before,
    the test starts from an empty Redis."""
    yield from flushed(redis_server)


def flushed(server: RedisServer) -> Iterator[redis.Redis]:
    """A client on ``server``, its data and scripts flushed first."""
    client = server.client()
    client.flushall()
    client.script_flush()
    yield client
    client.close()


@pytest.fixture
def app_factory() -> Iterator[Callable[..., Celery]]:
    """Build a Celery app using the celery-delayq transport: ``make(url, **settings)``.

    kombu keeps producer pools process-wide, keyed by broker URL: they are reset so
    each test's channels are built with that test's settings. Every app made is closed
    at the end (which also forgets it, so later tests see only their own apps).
    """
    apps: list[Celery] = []
    kombu.pools.reset()

    def make(url: str = NOWHERE, **settings: Any) -> Celery:
        app = build_app(
            "tests",
            {
                "broker_url": url,
                "broker_connection_retry_on_startup": False,
                "task_default_queue": "default",
                **settings,
            },
            current=True,
        )
        app.set_current()
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()
    kombu.pools.reset()


@pytest.fixture
def make_app(
    app_factory: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> Callable[..., Celery]:
    """``app_factory`` on the session's (flushed) Redis unless given another ``url``."""

    def make(url: str | None = None, **settings: Any) -> Celery:
        return app_factory(url or redis_server.url, **settings)

    return make


@pytest.fixture
def app(make_app: Callable[..., Celery]) -> Celery:
    return make_app()


@pytest.fixture
def periodic_app(make_app: Callable[..., Celery]) -> Celery:
    """``make_app()`` that knows the periodic entries' task, ``PERIODIC_TASK`` (so an entry
    of it raises no UnknownTaskWarning)."""
    app = make_app()

    @app.task(name=PERIODIC_TASK, shared=False)
    def tick(*args: Any, **kwargs: Any) -> None:
        """The entries' task."""

    return app


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    """A RabbitMQ of this test session (celery_delayq.testing.rabbitmq): a fresh vhost on
    ``RABBITMQ_URL``, else a private node; the tests skip, saying how to get one, if
    there is neither."""
    try:
        with rabbitmq_for_tests() as url:
            yield url
    except RabbitMQUnavailable as exc:
        pytest.skip(f"no RabbitMQ to test against: {exc}")


@pytest.fixture
def amqp_settings(
    rabbitmq_url: str, redis_server: RedisServer, redis_client: redis.Redis
) -> dict[str, Any]:
    """Settings of an app on RabbitMQ with its delayed store in the session's (flushed)
    Redis, and a default queue of its own (queues outlive a test in the vhost)."""
    return {
        "broker_transport": AMQP_TRANSPORT,
        "delayq_store_url": redis_server.url,
        "task_default_queue": f"q-{uuid.uuid4().hex[:8]}",
    }


@pytest.fixture
def make_amqp_app(
    app_factory: Callable[..., Celery], rabbitmq_url: str, amqp_settings: dict[str, Any]
) -> Callable[..., Celery]:
    """``app_factory`` on the session's RabbitMQ (``amqp_settings``, then ``settings``)."""

    def make(**settings: Any) -> Celery:
        return app_factory(rabbitmq_url, **{**amqp_settings, **settings})

    return make


@pytest.fixture(scope="session")
def store_server() -> Iterator[RedisServer]:
    """A second Redis of the session: a ``delayq_store_url`` apart from the broker's."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def store_client(store_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on that second Redis, flushed (data and scripts) first."""
    yield from flushed(store_server)


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A Redis Cluster of the session: 3 masters, no replicas (failover tests start
    their own)."""
    with RedisClusterServers(masters=3) as cluster:
        yield cluster


@pytest.fixture
def cluster_store_url(redis_cluster: RedisClusterServers) -> str:
    """``delayq_store_url`` of the session's cluster, every master flushed (data and
    scripts) first."""
    client = redis_cluster.client()
    for node in client.get_primaries():
        server = client.get_redis_connection(node)
        server.flushall()
        server.script_flush()
    client.close()
    return redis_cluster.url.replace("redis://", "redis+cluster://")


@pytest.fixture
def make_cluster_app(
    make_amqp_app: Callable[..., Celery], cluster_store_url: str
) -> Callable[..., Celery]:
    """An app on the session's RabbitMQ with its schedule on the session's cluster."""

    def make(**settings: Any) -> Celery:
        return make_amqp_app(**{"delayq_store_url": cluster_store_url, **settings})

    return make


@pytest.fixture(scope="session")
def sqs_server() -> Iterator[str]:
    """An SQS-compatible server of this session: moto in server mode (an emulator of
    AWS, from PyPI's moto[server]); its ``sqs://`` URL."""
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="delayq-moto-")) / "moto.log"
    process = spawn(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        log_path=log,
        session=False,
        die_with_parent=False,
    )
    try:
        wait_until(
            lambda: _answers(port),
            timeout=30,
            what="the moto server answers",
            abort=lambda: None if process.poll() is None else "it exited",
        )
        yield f"sqs://test:test@127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def make_sqs_app(
    app_factory: Callable[..., Celery],
    sqs_server: str,
    redis_server: RedisServer,
    redis_client: redis.Redis,
) -> Callable[..., Celery]:
    """An app on the moto SQS server, its delayed store in the session's (flushed) Redis
    and a queue of its own."""

    def make(**settings: Any) -> Celery:
        return app_factory(
            sqs_server,
            **{
                "broker_transport": SQS_TRANSPORT,
                "broker_transport_options": {"region": "us-east-1", "is_secure": False},
                "delayq_store_url": redis_server.url,
                "task_default_queue": f"q-{uuid.uuid4().hex[:8]}",
                **settings,
            },
        )

    return make
