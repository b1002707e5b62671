"""The RabbitMQ scenarios. Each ``measure(side)`` returns values keyed by its specs;
the report puts the comparison side in the "Vanilla Celery" column and celery-delayq in
the other, with their ratio."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import amqp
from celery import Celery
from kombu import Connection, Producer

from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store import Scheduled
from celery_delayq.testing import wait_until

from ..report import MetricSpec, Target
from .side import Side, percentile, rss_mib
from .worker_app import RECORD_TASK, make_app

MIB_TARGET = 1.0


def send(side: Side, count: int, **options: Any) -> None:
    task = side.app.tasks[RECORD_TASK]
    side.app.set_current()
    with side.app.producer_or_acquire() as producer:
        for _ in range(count):
            task.apply_async(producer=producer, **options)


class ConsumerTimeout:
    """Vanilla Celery holds an ETA task unacknowledged until it is due; past RabbitMQ's
    ``consumer_timeout`` the broker closes the worker's channel. celery-delayq's worker
    never holds one."""

    key = "timeout"

    def __init__(self, tasks: int, countdown: float, timeout: float) -> None:
        self.tasks, self.countdown, self.timeout = tasks, countdown, timeout
        #: This scenario's own node: the timeout lowered (other scenarios keep 30 min).
        self.node_config = {"consumer_timeout": str(int(timeout * 1000))}

    @property
    def title(self) -> str:
        return (
            f"consumer_timeout={self.timeout:g} s, {self.tasks} tasks with "
            f"countdown={self.countdown:g} s, one worker"
        )

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        every = Target(f"= {self.tasks}", lambda v: v == self.tasks)
        return (
            MetricSpec("ran", "tasks that ran", "", every, digits=0),
            MetricSpec("executions", "executions", "", every, digits=0),
            MetricSpec("closed", "channels closed by the broker (consumer_timeout)", "", digits=0),
            MetricSpec("crashed", "worker died (1: yes)", "", Target("= 0", lambda v: v == 0), 0),
            MetricSpec("late_p99", "lateness p99 (s after ETA)", "s", digits=2),
        )

    def measure(self, side: Side) -> dict[str, float | None]:
        side.declare()
        with side.worker() as process:
            send(side, self.tasks, countdown=self.countdown)
            # Window: every task due, plus three timeouts for the broker to act.
            window_end = time.time() + self.countdown + 3 * self.timeout + 5
            while time.time() < window_end and process.poll() is None:
                if len(side.runs()) >= self.tasks and time.time() > window_end - 3 * self.timeout:
                    break
                time.sleep(0.5)
            crashed = process.poll() is not None
        runs = side.runs()
        log = side.log_of()
        return {
            "ran": len({run["id"] for run in runs}),
            "executions": len(runs),
            "closed": log.count("delivery acknowledgement on channel"),
            "crashed": int(crashed),
            "late_p99": percentile(side.lateness(), 0.99),
        }


class WorkerMemory:
    """Worker RSS with a backlog of pending countdown tasks."""

    key = "memory"
    #: Unlimited prefetch: a vanilla worker takes the whole backlog at once (it would
    #: anyway, two tasks a second, since each ETA task raises its prefetch by one).
    prefetch = 0

    def __init__(self, pending: int) -> None:
        self.pending = pending

    @property
    def title(self) -> str:
        return f"worker RSS with {self.pending:,} pending countdown=3600 tasks"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec("idle", "worker RSS before", "MiB"),
            MetricSpec("loaded", "worker RSS with the backlog", "MiB"),
            MetricSpec(
                "growth", "growth", "MiB", Target(f"<= {MIB_TARGET:g}", lambda v: v <= MIB_TARGET)
            ),
        )

    def measure(self, side: Side) -> dict[str, float | None]:
        side.declare()
        with side.worker() as process:
            idle = settled(process)
            send(side, self.pending, countdown=3600)
            wait_until(
                lambda: ready(side) == 0,
                timeout=600,
                what="the worker took the backlog",
                abort=lambda: None if process.poll() is None else "the worker died",
            )
            loaded = settled(process)
        return {"idle": idle, "loaded": loaded, "growth": loaded - idle}


def settled(process: Any, samples: int = 4) -> float:
    """RSS (MiB) once four readings half a second apart agree within 0.25 MiB."""
    readings: list[float] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        readings = [*readings[-(samples - 1) :], rss_mib(process)]
        if len(readings) == samples and max(readings) - min(readings) <= 0.25:
            break
        time.sleep(0.5)
    return readings[-1]


def ready(side: Side) -> int:
    with side.app.connection_for_write() as connection:
        queue = side.app.amqp.queues[side.queue]
        _, count, _ = queue(connection.default_channel).queue_declare(passive=True)
    return int(count)


class Lateness:
    """Delay accuracy: Celery's native delayed delivery (quorum queues, 1 s steps
    through up to 28 dead-letter queues) against celery-delayq, the same tasks."""

    key = "lateness"
    quorum = True
    #: Celery's default prefetch multiplier: the native side's worker receives messages
    #: with an eta header, which it takes a few a second at prefetch 1.
    prefetch = 4

    def __init__(self, tasks: int, countdowns: tuple[float, float]) -> None:
        self.tasks, self.countdowns = tasks, countdowns

    @property
    def title(self) -> str:
        low, high = self.countdowns
        return f"lateness, {self.tasks} tasks, countdowns {low:g}-{high:g} s, quorum queue"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        return (
            MetricSpec("p50", "lateness p50", "ms", digits=0),
            MetricSpec("p99", "lateness p99", "ms", Target("<= 250", lambda v: v <= 250), 0),
            MetricSpec("max", "lateness max", "ms", digits=0),
        )

    def measure(self, side: Side) -> dict[str, float | None]:
        side.declare()
        rng = random.Random(7)
        with side.worker():
            side.app.set_current()
            task = side.app.tasks[RECORD_TASK]
            with side.app.producer_or_acquire() as producer:
                for _ in range(self.tasks):
                    task.apply_async(countdown=rng.uniform(*self.countdowns), producer=producer)
            wait_until(
                lambda: len(side.runs()) >= self.tasks,
                timeout=self.countdowns[1] + 60,
                what="every task ran",
            )
        late_ms = [max(0.0, s) * 1000 for s in side.lateness()]
        return {
            "p50": percentile(late_ms, 0.5),
            "p99": percentile(late_ms, 0.99),
            "max": max(late_ms) if late_ms else None,
        }


class MoveRate:
    """One mover handing due messages to RabbitMQ with confirms, against a plain kombu
    publish loop with confirms (``confirm_publish``) of the same messages, and, with
    fixed batches of 500, against py-amqp loops confirmed per 500 (the most one Python
    process publishes with confirms: the hand-over minus Redis), best of three each:
    one publishes the messages the mover publishes (the same body and headers, the
    stable id included, ``mandatory``), one bare bodies (no properties)."""

    key = "moverate"
    sides = ("limit", "delayq")
    ROUNDS = 3

    def __init__(self, messages: int) -> None:
        self.messages = messages

    @property
    def title(self) -> str:
        return f"move rate into RabbitMQ with confirms, {self.messages:,} due messages"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        target = Target(">= 0.8x the limit", lambda v: v >= 0.8)
        return (
            MetricSpec(
                "rate",
                "messages/s; vanilla column: kombu publish loop, confirm_publish",
                "",
                target,
                0,
                on_ratio=True,
            ),
            MetricSpec(
                "batched",
                "messages/s, batches of 500, best of 3; "
                "vanilla column: py-amqp loop of the same messages, confirms per 500",
                "",
                Target(">= 0.9x the py-amqp loop", lambda v: v >= 0.9),
                0,
                on_ratio=True,
            ),
            MetricSpec(
                "batched_bare",
                "messages/s, batches of 500, best of 3; "
                "vanilla column: py-amqp loop of bare bodies (no properties, not mandatory)",
                "",
                None,
                0,
                on_ratio=True,
            ),
        )

    def measure(self, side: Side) -> dict[str, float | None]:
        """The two comparisons of batches of 500 run next to each other in time (the
        limit side's last, the delayq side's first), each the best of ``ROUNDS`` from an
        empty queue: on a shared machine a round is only ever slowed by other work."""
        side.declare()
        body = b'{"n": 0, "padding": "' + b"x" * 300 + b'"}'
        if side.name != "delayq":
            rate = self.kombu_confirm_loop(side, body)
            self.purge(side)
            bare = self.best(
                side, lambda side, body: self.batched_confirm_loop(side, body, bare=True), body
            )
            return {
                "rate": rate,
                "batched_bare": bare,
                "batched": self.best(side, self.batched_confirm_loop, body),
            }
        # Fixed batches of 500 like the py-amqp loop's (delayq_move_call_budget 0: the
        # batch size alone bounds a call), then batches sized by time (the default).
        fixed = make_app({**side.env, "BENCH_MOVE_CALL_BUDGET": "0"})
        try:
            batched = self.best(side, lambda side, body: self.move(fixed, side, body), body)
        finally:
            fixed.close()
        rate = self.move(side.app, side, body)
        return {"rate": rate, "batched": batched, "batched_bare": batched}

    def best(self, side: Side, measure: Callable[[Side, bytes], float], body: bytes) -> float:
        rates = []
        for _ in range(self.ROUNDS):
            rates.append(measure(side, body))
            self.purge(side)
        return max(rates)

    @staticmethod
    def purge(side: Side) -> None:
        with Connection(side.env["BENCH_BROKER_URL"]) as connection:
            connection.default_channel.queue_purge(side.queue)

    def move(self, app: Celery, side: Side, body: bytes) -> float:
        """Messages/s of one mover moving ``messages`` due messages into the queue."""
        app.set_current()  # two apps with different delayq settings: say which publishes
        with open_store(app) as store:
            due = store.server_time_ms() - 1
            message = envelope(amqp.Message(body, application_headers={"task": RECORD_TASK}))
            store.schedule_many(
                Scheduled(side.queue, f"m{i}", f"t{i}", due, destination("", side.queue), message)
                for i in range(self.messages)
            )
            moved, start = 0, time.perf_counter()
            while moved < self.messages:
                moved += store.move_all_due().moved
            return self.messages / (time.perf_counter() - start)

    def batched_confirm_loop(
        self, side: Side, body: bytes, batch: int = 500, bare: bool = False
    ) -> float:
        """The physical limit of confirmed publishing from one Python process: publish a
        batch, then wait for its confirms (what the mover's publisher does, minus Redis).
        The messages are those the mover publishes (its ``task`` and stable id headers,
        ``mandatory``), or with ``bare`` the bodies alone."""
        url = side.env["BENCH_BROKER_URL"]
        with Connection(url) as connection:
            channel = connection.channel()
            channel.confirm_select()
            confirmed = [0]
            channel.events["basic_ack"].add(
                lambda tag, multiple: confirmed.__setitem__(0, max(confirmed[0], tag))
            )
            due = int(time.time() * 1000)
            start = time.perf_counter()
            for first in range(0, self.messages, batch):
                last = min(first + batch, self.messages)
                for i in range(first, last):
                    if bare:
                        channel._basic_publish(amqp.Message(body), routing_key=side.queue)
                        continue
                    headers = {"task": RECORD_TASK, STABLE_ID_HEADER: f"t{i}@{due}"}
                    message = amqp.Message(body, application_headers=headers)
                    channel._basic_publish(message, routing_key=side.queue, mandatory=True)
                while confirmed[0] < last:
                    connection.drain_events(timeout=30)
            return self.messages / (time.perf_counter() - start)

    def kombu_confirm_loop(self, side: Side, body: bytes) -> float:
        url = side.env["BENCH_BROKER_URL"]
        with Connection(url, transport_options={"confirm_publish": True}) as connection:
            producer = Producer(connection.default_channel)
            start = time.perf_counter()
            for _ in range(self.messages):
                producer.publish(
                    body,
                    routing_key=side.queue,
                    content_type="application/json",
                    content_encoding="utf-8",
                    delivery_mode=2,
                )
            return self.messages / (time.perf_counter() - start)
