"""Importing the settings path of the transports loads no other broker's client and
patches nothing in Celery: the AMQP transport keeps Celery's native delayed delivery
away on its first construction, not at import."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

CHECK = """
import sys
from celery.app import base
original = base.detect_quorum_queues
import celery_delayq.transport
loaded = [name for name in ("celery_delayq.brokers.amqp", "kombu.transport.pyamqp",
          "celery_delayq.brokers.sqs", "boto3", "flask") if name in sys.modules]
assert not loaded, loaded
assert base.detect_quorum_queues is original
"""


def test_importing_the_transport_path_loads_no_other_broker_and_patches_nothing() -> None:
    # A fresh interpreter: this test process has long imported everything.
    subprocess.run([sys.executable, "-c", CHECK], check=True)


def test_the_amqp_transport_patches_celery_when_first_built() -> None:
    check = (
        "from celery.app import base\n"
        "original = base.detect_quorum_queues\n"
        "from celery_delayq.transport import AMQPTransport\n"
        "assert base.detect_quorum_queues is original\n"
        "from kombu import Connection\n"
        "Connection('amqp://', transport=AMQPTransport).transport\n"
        "assert base.detect_quorum_queues.keeps_delayq_apps_away\n"
    )
    subprocess.run([sys.executable, "-c", check], check=True)


FACETS = """
import sys
import redis
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.lazy import first_use
from celery_delayq.core.store import DelayedStore, import_facets

import_facets()
before = {name for name in sys.modules if name.startswith("celery_delayq")}
store = DelayedStore(redis.Redis(), KeySpace())  # no I/O: nothing here connects
facets = [name for name, value in vars(DelayedStore).items() if isinstance(value, first_use)]
assert len(facets) >= 8, facets  # the scan sees the facets
for name in facets:
    getattr(store, name)
store.handover
after = {name for name in sys.modules if name.startswith("celery_delayq")}
assert after == before, sorted(after - before)
"""


def test_import_facets_imports_every_facet_the_store_makes_on_first_use() -> None:
    # A worker calls import_facets() before its pool forks, so that no thread imports a
    # module later (a fork while a thread holds an import lock leaves it held in the
    # child): every facet the store makes on first use, and the hand-over, must already
    # be imported by then. A fresh interpreter, so that nothing was imported before.
    subprocess.run([sys.executable, "-c", FACETS], check=True)
