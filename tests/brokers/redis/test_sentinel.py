"""The Sentinel flavour of the transport, against a real redis-sentinel and a real worker."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import celery_delayq
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import RedisServer, sentinels, wait_until

from ...helpers import celery_process, runs

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[tuple[RedisServer, int]]:
    """A master and one sentinel monitoring it as ``mymaster``."""
    with RedisServer() as master, sentinels(master, tmp_path) as (port,):
        yield master, port


def test_sentinel_transport_delays_and_delivers_through_the_master(make_app, sentinel):
    master, sentinel_port = sentinel
    settings = {
        "broker_transport": "celery_delayq.transport:SentinelTransport",
        "broker_transport_options": {"master_name": "mymaster"},
    }
    url = f"sentinel://127.0.0.1:{sentinel_port}/0"
    app = make_app(url=url, **settings)

    sent = app.send_task("tests.worker_app.remember", ("via sentinel",), countdown=1)
    assert master.client().hlen("delayq:{default}:msg") == 1
    assert celery_delayq.backlog(app)[0].pending == 1

    with celery_process("worker", url, settings, "-P", "solo", record_url=master.url):
        wait_until(lambda: runs(master.client()), timeout=15)
    assert [r["id"] for r in runs(master.client())] == [sent.id]


def test_a_store_behind_sentinel_keeps_the_schedule_of_another_broker(
    make_app, sentinel, redis_client
):
    """``delayq_store_url = "sentinel://..."`` with ``delayq_store_master_name``: the
    schedule on the master the sentinel names, the queue on the (plain Redis) broker."""
    master, sentinel_port = sentinel
    app = make_app(
        delayq_store_url=f"sentinel://127.0.0.1:{sentinel_port}/0",
        delayq_store_master_name="mymaster",
    )

    sent = app.send_task("tests.worker_app.remember", ("via sentinel",), countdown=3600)
    assert master.client().hlen("delayq:{default}:msg") == 1
    assert redis_client.llen("default") == 0
    assert celery_delayq.reschedule(app, sent.id, countdown=-1) == 1
    assert deliver_all_due(app) == 1

    (delivered,) = redis_client.lrange("default", 0, -1)
    assert json.loads(delivered)["headers"]["id"] == sent.id
    assert master.client().hlen("delayq:{default}:msg") == 0
