"""The shipped Grafana dashboard (dashboards/grafana-celery-delayq.json) queries only
metrics that celery-delayq exports, as read from a real store, and shows every one."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from kombu import Queue

import celery_delayq
from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.testing import wait_until

from ..helpers import noop_task, parse_metrics, publish_limited, scrape

pytestmark = pytest.mark.integration

pytest.importorskip("prometheus_client")

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "grafana-celery-delayq.json"
METRIC = re.compile(r"\bcelery_delayq_[a-z_]+\b")
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
LIMITED = "tests.limited"


def load() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' and its variables'."""
    found = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["query"]["query"])
    return found


def exported(app: Celery) -> tuple[set[str], set[str]]:
    """The families and the sample names the exporter serves for a store with a task of
    each kind: pending, moved (the lateness histogram), cancelled, keyed and requeued,
    flow-controlled; and a periodic entry with a recorded run."""
    task = noop_task(app)
    publish_limited(app, LIMITED, 2, key="k")
    task.apply_async(countdown=3600)
    celery_delayq.cancel(app, task.apply_async(countdown=3600).id)
    celery_delayq.debounce(task, key="k", countdown=3600)
    task.apply_async(countdown=0.1)
    with open_store(app) as store:
        wait_until(lambda: store.move_all_due().moved > 0, what="the 0.1 s task moved")
    with app.connection_for_write() as connection:  # a redelivery: a reject with requeue
        Queue(app.conf.task_default_queue)(connection.default_channel).get().reject(requeue=True)
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "hourly", "x.y", 3600)
    with open_store(app) as store:
        now = datetime.now(timezone.utc)
        EntryHistory(store.client, store.keys).ran("hourly", now, now)
    types, samples = parse_metrics(scrape(app))
    return set(types), set(samples)


def test_every_query_names_an_exported_metric_and_every_metric_is_shown(make_app: Any) -> None:
    families, samples = exported(make_app(delayq_rate_limits={LIMITED: "1/m"}))
    used = {name for expr in queries(load()) for name in METRIC.findall(expr)}
    assert used <= samples, f"not exported: {sorted(used - samples)}"
    shown = {re.sub(r"_(bucket|sum|count|total)$", "", name) for name in used}
    assert families <= shown, f"not on the dashboard: {sorted(families - shown)}"


def test_the_dashboard_is_well_formed() -> None:
    dashboard = load()
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["targets"], panel
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
    for expr in queries(dashboard):
        assert set(VARIABLE.findall(expr)) <= defined, expr
        for opening, closing in ("()", "[]", "{}"):
            assert expr.count(opening) == expr.count(closing), expr
        assert expr.count('"') % 2 == 0, expr
