"""Helpers shared by the tests, the benchmarks, the chaos harness and the demo.

- ``waiting``: ``wait_until``, the one way to wait, for an observed condition (never a
  fixed sleep); ``activity`` and ``wait_until_quiescent``, a wait until nothing is left
  that could make a task run.
- ``delivery``: ``publish`` as a given app, ``kombu_lists``, and ``schedule_numbered`` /
  ``delivered_numbers`` to count deliveries; ``eta_seconds``.
- ``processes``: ``spawn`` and ``stop_group``, the one way subprocesses start and stop.
- ``apps``: ``build_app``, the one factory of Celery apps on celery-delayq's transport.
- Servers: ``redis_server`` (``RedisServer``, ``sentinels``), ``redis_cluster``
  (``RedisClusterServers``), ``rabbitmq`` (``rabbitmq_for_tests``, ``RabbitMQNode``).
- ``browser``: a headless chromium's flags and binary.
- ``ledger`` (``LedgerWriter``, ``LedgerReader``) and ``slots`` (``Slot``, and the roles
  ``WORKER``, ``BEAT``, ``MOVER``, ``PRODUCER``): the chaos harness's and the periodic
  benchmark's record of events kept outside Redis, and processes killed and started again.

Nothing here imports click or pytest (an import-linter contract forbids click); the
command-line helpers and fixtures of the tests live with the tests.
"""

from .apps import AMQP_TRANSPORT, SQS_TRANSPORT, TRANSPORT, build_app
from .browser import CHROMIUM_FLAGS, chromium_binary
from .delivery import (
    PRIORITY_SEP,
    PRIORITY_STEPS,
    delivered_numbers,
    eta_seconds,
    kombu_lists,
    publish,
    schedule_numbered,
)
from .ledger import LedgerReader, LedgerWriter
from .processes import celery_command, exit_on_termination, free_port, spawn, stop_group
from .rabbitmq import (
    RabbitMQNode,
    RabbitMQUnavailable,
    broker_reachable,
    fresh_vhost,
    rabbitmq_for_tests,
)
from .redis_cluster import SLOTS, RedisClusterServers, SlotMigration, SlotRange, slot_of
from .redis_server import RedisServer, redis_server_binary, sentinels
from .slots import BEAT, MOVER, PRODUCER, WORKER, Slot
from .waiting import Activity, WaitAborted, activity, wait_until, wait_until_quiescent

__all__ = [
    "AMQP_TRANSPORT",
    "BEAT",
    "CHROMIUM_FLAGS",
    "LedgerReader",
    "LedgerWriter",
    "MOVER",
    "PRIORITY_SEP",
    "PRIORITY_STEPS",
    "PRODUCER",
    "SQS_TRANSPORT",
    "TRANSPORT",
    "Activity",
    "RabbitMQNode",
    "RabbitMQUnavailable",
    "RedisClusterServers",
    "RedisServer",
    "SLOTS",
    "Slot",
    "SlotMigration",
    "SlotRange",
    "WORKER",
    "WaitAborted",
    "activity",
    "broker_reachable",
    "celery_command",
    "chromium_binary",
    "build_app",
    "delivered_numbers",
    "eta_seconds",
    "exit_on_termination",
    "free_port",
    "fresh_vhost",
    "kombu_lists",
    "publish",
    "rabbitmq_for_tests",
    "redis_server_binary",
    "schedule_numbered",
    "sentinels",
    "slot_of",
    "spawn",
    "stop_group",
    "wait_until",
    "wait_until_quiescent",
]
