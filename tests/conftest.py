"""Fixtures of all three kinds of tests (helpers that are not fixtures: ``tests.helpers``).

- ``tests/unit``: no server at all (``app_factory`` builds apps on an unused address).
- ``tests/integration``: a real redis-server (one per session, ``redis_server``), flushed
  before every test that uses it (``redis_client``, ``make_app``, ``app``).
- ``tests/system``: real ``celery worker``, ``beat`` and ``delayq mover`` subprocesses
  (``tests.helpers.celery_process``), Sentinel, TLS, ACL users, kills.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import kombu.pools
import pytest
import redis
from celery import Celery

from celery_delayq.testing import RedisServer

from .helpers import NOWHERE

TRANSPORT = "celery_delayq.transport:Transport"


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client on a freshly flushed server (data and scripts): whatever ran before,
    the test starts from an empty Redis."""
    client = redis_server.client()
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
        app = Celery("tests", set_as_current=True)
        app.conf.update(
            {
                "broker_url": url,
                "broker_transport": TRANSPORT,
                "broker_connection_retry_on_startup": False,
                "task_default_queue": "default",
                **settings,
            }
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
