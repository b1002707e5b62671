"""Metrics code that needs no server: bucket arithmetic, refusals, the optional extra."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from celery import Celery

from celery_delayq.config.errors import ConfigurationError
from celery_delayq.metrics import lateness_buckets, start_exporter
from celery_delayq.testing import free_port

from ..helpers import invoke

pytestmark = pytest.mark.unit


def test_lateness_buckets_keep_bounds_unknown_to_this_version() -> None:
    stats = {"late_le_5": 1, "late_le_7": 2, "late_le_inf": 1, "late_sum_ms": 90_020}
    buckets, total = lateness_buckets(stats)
    assert buckets[:3] == [("0.005", 1), ("0.007", 3), ("0.01", 3)]
    assert buckets[-2:] == [("60.0", 3), ("+Inf", 4)]
    assert total == 90.02


def test_start_exporter_refuses_another_transport(app_factory: Callable[..., Celery]) -> None:
    app = app_factory(broker_transport="redis")
    with pytest.raises(ConfigurationError, match="celery_delayq.transport:Transport"):
        start_exporter(app, free_port(), "127.0.0.1")


def test_missing_prometheus_client_says_which_extra(
    app_factory: Callable[..., Celery], monkeypatch: pytest.MonkeyPatch
) -> None:
    app = app_factory()
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import now fails
    with pytest.raises(ImportError, match=r"pip install 'celery-delayq\[prometheus\]'"):
        start_exporter(app, free_port(), "127.0.0.1")
    result = invoke(app, "exporter", "--port", str(free_port()))
    assert result.exit_code == 1
    assert "celery-delayq[prometheus]" in result.output
