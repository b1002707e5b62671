"""A Celery app for tests that run real worker and beat subprocesses.

Configured from the environment: ``BROKER_URL``, ``DELAYQ_SETTINGS`` (JSON object of
extra Celery settings; ``task_queues`` as a list of dicts: name, exchange, exchange_type,
routing_key, queue_arguments). Every task execution is recorded under ``test:runs`` in the
Redis at ``RECORD_URL`` (default: the broker) so the test process can count and time them.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import redis
from kombu import Exchange, Queue

from celery_delayq import throttle_current
from celery_delayq.config.limits import LIMIT_KEY_HEADER
from celery_delayq.testing import build_app

settings = json.loads(os.environ.get("DELAYQ_SETTINGS", "{}"))
if "task_queues" in settings:  # JSON: each queue as a dict of its parts
    settings["task_queues"] = [
        Queue(
            queue["name"],
            Exchange(queue["exchange"], type=queue["exchange_type"]),
            routing_key=queue["routing_key"],
            queue_arguments=queue["queue_arguments"],
        )
        for queue in settings["task_queues"]
    ]
app = build_app(
    "worker_app",
    {
        "broker_url": os.environ.get("BROKER_URL", "redis://127.0.0.1:6379/0"),
        "task_default_queue": "default",
        "worker_prefetch_multiplier": 1,
        "beat_schedule_filename": os.environ.get("BEAT_SCHEDULE_FILE", "celerybeat-schedule"),
        **settings,
    },
    current=True,
)


def eta_of(request: Any) -> Any:
    """The task's ETA: Celery's own, or, for a task a mover handed to RabbitMQ (which
    arrives as an ordinary task), the ``x-delayq-eta`` header."""
    return request.eta or request.get("x-delayq-eta")


def record(task_id: str, eta: Any, **extra: Any) -> None:
    """Note one execution: task id, its ETA as the worker saw it, and the start time (a
    value JSON cannot carry, such as the Decimal id of a hostile message, as its repr)."""
    if eta is not None and not isinstance(eta, str):
        eta = eta.isoformat()
    entry = {"id": task_id, "eta": eta, "at": time.time(), **extra}
    with redis.Redis.from_url(os.environ.get("RECORD_URL") or app.conf.broker_url) as client:
        client.rpush("test:runs", json.dumps(entry, default=repr))


@app.task(bind=True)
def remember(self: Any, label: str = "") -> None:
    record(self.request.id, eta_of(self.request), label=label)


@app.task(bind=True)
def tick(self: Any, *args: Any) -> None:
    """A periodic entry's task: records its entry, the occurrence it stands for and its
    arguments (an upsert's, say)."""
    request = self.request
    occurrence, entry = request.get("delayq-occurrence"), request.get("delayq-periodic")
    record(request.id, eta_of(request), occurrence=occurrence, entry=entry, args=list(args))


def gate(self: Any) -> None:
    """Record the run's start, wait until the test releases it (a token pushed to
    ``test:gate``), then record its end."""
    request = self.request
    facts = {
        "occurrence": request.get("delayq-occurrence"),
        "entry": request.get("delayq-periodic"),
    }
    record(request.id, eta_of(request), phase="start", pid=os.getpid(), **facts)
    with redis.Redis.from_url(os.environ.get("RECORD_URL") or app.conf.broker_url) as client:
        client.blpop(["test:gate"], timeout=120)
    record(request.id, eta_of(request), phase="end", pid=os.getpid(), **facts)


#: A periodic entry's task that runs until the test releases it.
gated = app.task(bind=True, name="tests.worker_app.gated")(gate)
#: The same, with a hard time limit of 8 s: the lease of an overlap-skip entry's run.
gated_briefly = app.task(bind=True, name="tests.worker_app.gated_briefly", time_limit=8)(gate)


@app.task(bind=True, name="tests.worker_app.gated_after_a_retry")
def gated_after_a_retry(self: Any) -> None:
    """The first run is retried once (in 3 s); each run after it waits like ``gated``."""
    with redis.Redis.from_url(os.environ.get("RECORD_URL") or app.conf.broker_url) as client:
        first = client.set("test:retried", "1", nx=True)
    if first:
        occurrence = self.request.get("delayq-occurrence")
        record(self.request.id, eta_of(self.request), phase="retried", occurrence=occurrence)
        raise self.retry(countdown=3)
    gate(self)


@app.task(bind=True, acks_late=True)
def hold(self: Any, label: str = "", seconds: float = 60.0) -> None:
    """Record its start, then run for ``seconds`` (long enough to be killed), unless it
    was delivered again: then it ends at once."""
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    record(
        self.request.id, eta_of(self.request), label=label, redelivered=redelivered, pid=os.getpid()
    )
    if not redelivered:
        time.sleep(seconds)


@app.task(bind=True, acks_late=True)
def freeze_worker_at_the_end(self: Any) -> None:
    """Record the run, then freeze the worker's main process (SIGSTOP to the pool child's
    parent) as the task returns: the task has ended and its ack cannot be sent. Delivered
    again, it only records."""
    redelivered = bool((self.request.delivery_info or {}).get("redelivered"))
    record(self.request.id, eta_of(self.request), redelivered=redelivered, pid=os.getpid())
    if not redelivered:
        os.kill(os.getppid(), signal.SIGSTOP)


@app.task(bind=True, acks_late=True)
def kill_worker(self: Any) -> None:
    """Record the run, then SIGKILL the worker's main process and this pool process, as
    a message that exhausts memory or crashes C code would: every time it is delivered."""
    record(self.request.id, eta_of(self.request), pid=os.getpid())
    os.kill(os.getppid(), signal.SIGKILL)
    os._exit(1)


@app.task(bind=True, max_retries=3)
def retry_once(self: Any, countdown: float) -> None:
    record(self.request.id, eta_of(self.request), retries=self.request.retries)
    if self.request.retries == 0:
        raise self.retry(countdown=countdown)


@app.task(bind=True, max_retries=3)
def retry_bigger(self: Any, payload: str, size: int) -> None:
    """Record the run; the first retries in a minute with an argument of ``size`` bytes."""
    record(self.request.id, eta_of(self.request), retries=self.request.retries)
    if self.request.retries == 0:
        raise self.retry(args=("x" * size, size), countdown=60)


@app.task(
    bind=True, autoretry_for=(ValueError,), retry_backoff=1, retry_jitter=False, max_retries=2
)
def flaky(self: Any) -> None:
    """Fails twice; Celery's autoretry backs off 1 s, then 2 s."""
    record(self.request.id, eta_of(self.request), retries=self.request.retries)
    if self.request.retries < 2:
        raise ValueError("not yet")


@app.task(bind=True, rate_limit="2/s")
def paced(self: Any, label: str = "") -> None:
    """Celery's own per-worker rate limit of 2/s (a limit across all workers under
    ``delayq_global_rate_limits``): records its start and worker."""
    record(self.request.id, eta_of(self.request), label=label, worker=self.request.hostname)


@app.task(bind=True)
def per_customer(self: Any, customer_id: str, label: str = "") -> None:
    """Records its start and customer (publishers give it a limit keyed by customer)."""
    record(self.request.id, eta_of(self.request), label=label, customer=customer_id)


@app.task(bind=True, name="tests.worker_app.limited")
def limited(self: Any, label: str = "") -> None:
    """A flow-controlled task (its limits: the test's ``delayq_rate_limits``): records
    its run and the limit key it was sent with."""
    key = self.request.get(LIMIT_KEY_HEADER)
    record(self.request.id, eta_of(self.request), label=label, key=key)


@app.task(bind=True, name="tests.worker_app.limited_429", max_retries=3)
def limited_429(self: Any, retry_after: float, meets_429: bool = False) -> None:
    """A flow-controlled task; the first run of one sent with ``meets_429`` meets an
    HTTP 429 with ``Retry-After: retry_after``: it throttles its own limit key for that
    long (``throttle_current``), records the hold's end (Redis clock, us), then retries
    as usual."""
    key = self.request.get(LIMIT_KEY_HEADER)
    with redis.Redis.from_url(os.environ.get("RECORD_URL") or app.conf.broker_url) as client:
        first = meets_429 and client.set("test:429", "1", nx=True)
    if not first:
        record(self.request.id, eta_of(self.request), key=key, phase="run")
        return
    hold = throttle_current(retry_after)
    record(self.request.id, eta_of(self.request), key=key, phase="throttled", until=hold.until_us)
    raise self.retry(countdown=retry_after)


def first_run(task_id: str) -> bool:
    """Whether this is the first run of the message ``task_id`` (not one delivered again)."""
    with redis.Redis.from_url(os.environ.get("RECORD_URL") or app.conf.broker_url) as client:
        return bool(client.sadd("test:stamped", task_id))


@app.task(bind=True, acks_late=True, max_retries=1)
def stamped(
    self: Any,
    seconds: float = 1.0,
    outcome: str = "return",
    label: str = "",
    again: float | None = None,
    deaf: bool = False,
) -> None:
    """Record its start, run for ``seconds``, record its end, then return, or fail
    (``outcome`` "fail"), or retry once at once ("retry"). Delivered again (its worker
    killed), it runs in full (for ``again`` seconds instead, when given): a flow-control
    test counts it running. ``deaf``: the run (not one delivered again) ignores SIGTERM, as
    a task stuck in C code does, so at its hard time limit only the pool's SIGKILL ends it
    (for runs a limit stops: its pool process stays deaf)."""
    if again is not None and not first_run(self.request.id):
        seconds = again
    elif deaf:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    facts = {
        "label": label,
        "pid": os.getpid(),
        "worker": os.getpgid(0),  # the worker's process group: a test kills it whole
        "retries": self.request.retries,
    }
    record(self.request.id, None, phase="start", **facts)
    time.sleep(seconds)
    record(self.request.id, None, phase="end", **facts)
    if outcome == "fail":
        raise ValueError("failed on purpose")
    if outcome == "retry" and self.request.retries == 0:
        raise self.retry(countdown=0)
