"""Importing the settings path of the transports loads no other broker's client and
patches nothing in Celery: the AMQP transport keeps Celery's native delayed delivery
away on its first construction, not at import."""

from __future__ import annotations

import subprocess
import sys

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
