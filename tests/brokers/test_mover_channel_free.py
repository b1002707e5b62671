"""A mover on a Redis broker reaches its store without building a kombu channel
(brokers/connect.py's StoreFactory: the client is made from the connection's settings by
kombu's own code), moves real messages with the broker's ``global_keyprefix``, and
releases the connections it opened when it stops."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from celery import Celery
from kombu.transport import virtual

from celery_delayq.brokers.connect import mover_thread
from celery_delayq.testing import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def channel_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The name of the thread each kombu virtual channel is built in, while the test runs."""
    threads: list[str] = []
    init = virtual.Channel.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        threads.append(threading.current_thread().name)
        init(self, *args, **kwargs)

    monkeypatch.setattr(virtual.Channel, "__init__", counted)
    yield threads


def test_a_mover_moves_real_messages_without_building_a_kombu_channel(
    make_app: Callable[..., Celery], redis_client: redis.Redis, channel_threads: list[str]
) -> None:
    app = make_app(broker_transport_options={"global_keyprefix": "gp:"})
    eta = datetime.now(timezone.utc) + timedelta(seconds=1)
    for number in range(20):
        app.send_task("tests.add", (number, 1), eta=eta)
    assert redis_client.llen("gp:default") == 0, "kept in the store until due"
    assert channel_threads, "the publishes went through a kombu channel (the check counts)"
    publishing = len(channel_threads)
    clients_before = len(redis_client.client_list())

    thread = mover_thread(app, "no-channel")
    thread.start()
    try:
        wait_until(lambda: redis_client.llen("gp:default") == 20, what="the 20 moved")
    finally:
        thread.stop()

    assert channel_threads[publishing:] == [], "the mover built a kombu channel"
    wait_until(
        lambda: len(redis_client.client_list()) <= clients_before,
        what="the mover's connections closed",
    )
