"""The generated reference pages (docs/_ext/delayq_reference.py) hold what the running
code has: every metric family a real collector yields on a real Redis, and every key a
store writes there."""

from __future__ import annotations

import re
import sys

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store

from .snippets import ROOT

pytest.importorskip("sphinx", reason="the docs extra (pip install -e '.[docs]')")
pytest.importorskip("prometheus_client")
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import delayq_reference  # noqa: E402

pytestmark = pytest.mark.integration


def test_the_metrics_page_lists_what_the_collector_yields(app: Celery) -> None:
    from celery_delayq.metrics import DelayqCollector

    app.send_task("x.y", countdown=3600, queue="alpha")
    families = {f.name: f.type for f in DelayqCollector(app).collect()}
    documented = {m.name: m.kind for m in delayq_reference.metrics()}
    assert families == documented


def test_the_keys_page_lists_every_key_a_store_writes(app: Celery) -> None:
    app.conf.delayq_key_prefix = "P"
    app.send_task("x.y", countdown=3600, queue="Q")
    with pytest.warns(periodic.UnknownTaskWarning):
        periodic.upsert(app, "entry", "x.y", 60, options={"queue": "Q"})
    with open_store(app) as store:
        written = {key.decode() for key in store.client.keys("P:*")}
    documented = {key for key, _, _ in delayq_reference.key_layout()}
    pages = {key for key in written if key.startswith("P:{Q}:p:")}
    assert pages, written
    changes = {key for key in written if key.startswith("P:periodic:changes:")}
    assert changes == {"P:periodic:changes:{P:periodic}:entry"}
    assert "P:periodic:changes:{P:periodic}:<name>" in documented
    assert written - pages - changes <= documented
    assert "P:{Q}:p:<n>" in documented
    assert {"P:periodic", "P:{Q}:periodic", "P:{Q}:periodic:ahead"} <= written


def test_the_keys_page_names_the_consume_paths_keys() -> None:
    """The consume path's keys beside kombu's (a table written by hand on the keys page):
    every ``_delayq.`` name the code forms is on it."""
    code = "".join(
        (ROOT / "celery_delayq" / "brokers" / "redis" / name).read_text()
        for name in ("consume.py", "landing.py", "restore.py")
    )
    names = set(re.findall(r"\"(_delayq\.[a-z]+)\.?\"", code))
    page = (ROOT / "docs" / "reference" / "keys.md").read_text()
    assert len(names) == 4, names
    assert [name for name in sorted(names) if f"`{name}" not in page] == []
