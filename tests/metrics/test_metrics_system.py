"""A worker serves Prometheus metrics when ``delayq_metrics_port`` is set."""

from __future__ import annotations

import pytest

from celery_delayq.testing import free_port, wait_until

from ..helpers import celery_process, fetch_metrics

pytestmark = pytest.mark.system


def test_a_worker_serves_metrics_when_delayq_metrics_port_is_set(redis_server, redis_client):
    port = free_port()
    settings = {"delayq_metrics_port": port, "delayq_metrics_addr": "127.0.0.1"}
    with celery_process("worker", redis_server.url, settings, "-P", "solo"):
        text = wait_until(lambda: _scrape_or_none(port), timeout=10)
    assert "celery_delayq_up 1.0" in text
    assert "celery_delayq_movers_alive" in text


def _scrape_or_none(port: int) -> str | None:
    try:
        return fetch_metrics(port)
    except OSError:
        return None
