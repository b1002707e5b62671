"""Concurrency limits across workers, with real prefork workers on Redis: at most the
limit of a task's (or limit key's) tasks run at once, counted from the start and end
stamps the tasks write (tests.worker_app.stamped); a slot comes back as its task
returns, fails or retries (well before its lease would end), and when its worker dies,
once its lease ends; a message delivered again without a slot waits for one.

A task killed with its worker has no end stamp: it counts as running until its worker
was killed (the whole process group, SIGKILLed, as when a machine dies)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
import redis
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.config.limits import LIMIT_KEY_HEADER, SLOT_HEADER
from celery_delayq.core.layout.gates import bucket_of
from celery_delayq.core.layout.keys import QueueKeys
from celery_delayq.core.layout.record import task_key
from celery_delayq.testing import wait_until
from celery_delayq.testing.processes import celery_command, spawn, stop_group

from ..helpers import REPO_ROOT, WatchedProcess, celery_process, runs, worker_app_env
from .test_slot_headers import CRAFTED

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

STAMPED = "tests.worker_app.stamped"


def settings_of(limit: int, lease: float = 60.0, **more: Any) -> dict[str, Any]:
    """The settings of the publishing app and the workers alike. The movers sleep up
    to a minute: only a wake-up brings a release forward (a slot given back)."""
    return {
        "delayq_concurrency_limits": {STAMPED: limit},
        "delayq_concurrency_lease": lease,
        "delayq_mover_max_sleep": 60.0,
        **more,
    }


def queue_keys(app: Celery) -> QueueKeys:
    with open_store(app) as store:
        return store.keys.for_queue("default")


def held_slots(client: redis.Redis, app: Celery, key: str | None = None) -> dict[bytes, float]:
    """The bucket's running slots: message key -> lease end (ms)."""
    running = queue_keys(app).gate("r", bucket_of(STAMPED, key))
    return dict(client.zrange(running, 0, -1, withscores=True))


Run = dict[str, Any]  # id, worker, pid, retries, start, end (None: killed)


def runs_of(client: redis.Redis) -> list[Run]:
    """Each execution of ``stamped``: its start stamp and its end stamp (None if none)."""
    found: dict[tuple[Any, ...], Run] = {}
    for stamp in runs(client):
        run = (stamp["id"], stamp["pid"], stamp["retries"], stamp["worker"])
        if stamp["phase"] == "start":
            found[run] = {**stamp, "start": stamp["at"], "end": None}
        else:
            found[run]["end"] = stamp["at"]
    return list(found.values())


def most_at_once(runs_: list[Run], killed: dict[int, float] | None = None) -> int:
    """The most runs going at any instant; a run with no end stamp goes on until its
    worker was killed (``killed``: process group -> when), or to the end."""
    events = []
    for run in runs_:
        end = run["end"]
        if end is None:
            end = (killed or {}).get(run["worker"], float("inf"))
        events += [(run["start"], 1), (end, -1)]
    going = most = 0
    for _, change in sorted(events):  # at one instant an end (-1) sorts before a start
        going += change
        most = max(most, going)
    return most


def ended(client: redis.Redis) -> int:
    return sum(1 for run in runs_of(client) if run["end"] is not None)


def workers(url: str, settings: dict[str, Any], count: int, *args: str) -> Any:
    stack = ExitStack()
    for n in range(count):
        stack.enter_context(
            celery_process("worker", url, settings, "-n", f"w{n}@%h", "--without-gossip", *args)
        )
    return stack


@pytest.mark.promise("concurrency-at-most-n", "concurrency-slot-back-at-end")
def test_at_most_the_limit_run_at_once_across_workers_and_each_slot_comes_back_at_once(
    make_app, redis_server, redis_client
) -> None:
    """Limit 2, ten tasks of a second, two workers of three processes each: never more
    than two at once, two at once at times, each task once, and all done long before a
    single lease (60 s) would have ended."""
    settings = settings_of(2)
    app = make_app(**settings)
    with workers(redis_server.url, settings, 2, "-c", "3"):
        ids = [app.send_task(STAMPED, (1.0,), {"label": str(n)}).id for n in range(10)]
        wait_until(lambda: ended(redis_client) == 10, timeout=45, what="ten tasks done")
    done = runs_of(redis_client)
    assert sorted(run["id"] for run in done) == sorted(ids)
    assert most_at_once(done) == 2
    assert held_slots(redis_client, app) == {}


@pytest.mark.promise("concurrency-slot-back-at-end")
def test_a_slot_comes_back_as_its_task_fails_and_as_it_retries(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1 and a lease of 60 s: a failing task, a task retried once and a plain
    one: each run starts within seconds of the run before it ending."""
    settings = settings_of(1)
    app = make_app(**settings)
    with workers(redis_server.url, settings, 1, "-c", "3"):
        app.send_task(STAMPED, (0.5, "fail"), {"label": "fails"})
        app.send_task(STAMPED, (0.5, "retry"), {"label": "retries"})
        app.send_task(STAMPED, (0.5,), {"label": "plain"})
        wait_until(lambda: ended(redis_client) == 4, timeout=45, what="four runs done")
    done = sorted(runs_of(redis_client), key=lambda run: run["start"])
    # one due instant's messages leave the store in no set order
    assert sorted((run["label"], run["retries"]) for run in done) == [
        ("fails", 0),
        ("plain", 0),
        ("retries", 0),
        ("retries", 1),
    ]
    assert most_at_once(done) == 1
    for before, after in zip(done, done[1:]):
        # not a lease (60 s), nor a mover's sleep (a minute)
        assert after["start"] - before["end"] < 10, (before, after)
    assert held_slots(redis_client, app) == {}


@pytest.mark.promise("concurrency-renewed")
def test_a_task_running_for_several_leases_keeps_its_slot(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1, a lease of 2 s: a task of 8 s holds its slot (its worker renews the
    lease), so the next one starts only as it ends."""
    settings = settings_of(1, 2.0)
    app = make_app(**settings)
    with workers(redis_server.url, settings, 2, "-c", "2"):
        app.send_task(STAMPED, (8.0,), {"label": "long"})
        wait_until(lambda: runs_of(redis_client), timeout=30, what="long started")
        app.send_task(STAMPED, (0.5,), {"label": "next"})
        wait_until(lambda: ended(redis_client) == 2, timeout=45, what="both done")
    long, after = sorted(runs_of(redis_client), key=lambda run: run["start"])
    assert (long["label"], after["label"]) == ("long", "next")
    assert after["start"] >= long["end"]


@pytest.mark.promise("concurrency-renewed")
def test_a_worker_renews_slots_after_one_of_its_tasks_ended(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1, a lease of 2 s, one worker: a short task runs and ends first (the worker
    stops renewing its slot), then a task of 8 s still holds its slot throughout."""
    settings = settings_of(1, 2.0)
    app = make_app(**settings)
    with workers(redis_server.url, settings, 1, "-c", "2"):
        app.send_task(STAMPED, (0.5,), {"label": "short"})
        wait_until(lambda: ended(redis_client) == 1, timeout=30, what="the short one done")
        app.send_task(STAMPED, (8.0,), {"label": "long"})
        wait_until(lambda: len(runs_of(redis_client)) == 2, timeout=30, what="long started")
        app.send_task(STAMPED, (0.5,), {"label": "next"})
        wait_until(lambda: ended(redis_client) == 3, timeout=45, what="all done")
    _, long, after = sorted(runs_of(redis_client), key=lambda run: run["start"])
    assert (long["label"], after["label"]) == ("long", "next")
    assert after["start"] >= long["end"]


def send_unreleased(url: str, app: Celery, key: str) -> str:
    """A message of ``stamped`` naming its slot, pushed to the queue past the gate (by
    stock kombu), as the broker delivers one again after its worker died; its id."""
    sender = Celery("unreleased", broker=url, set_as_current=False)
    sender.conf.update(broker_transport="redis", task_default_queue="default")
    message = app.amqp.create_task_message("unreleased-1", STAMPED, (0.5,), {"label": "again"})
    headers = {
        **message.headers,
        LIMIT_KEY_HEADER: key,
        SLOT_HEADER: ["default", bucket_of(STAMPED, key)],
    }
    with sender.producer_or_acquire() as producer:
        producer.publish(
            message.body,
            exchange="",
            routing_key="default",
            headers=headers,
            serializer="json",
            **message.properties,
        )
    sender.close()
    return "unreleased-1"


@pytest.mark.promise("concurrency-redelivered-waits")
def test_a_message_delivered_again_without_its_slot_waits_for_a_free_one(
    make_app, redis_server, redis_client
) -> None:
    """Its slot's lease ran out and the key's only slot is held (by a message the test
    made up): the worker does not run it but sends it back to its bucket, where it
    waits until the slot is given back, then runs once."""
    settings = settings_of(1)
    app = make_app(**settings)
    keys = queue_keys(app)
    bucket = bucket_of(STAMPED, "k")
    redis_client.hset(keys.gate("s", bucket), "spec", "c1/60000")
    redis_client.zadd(keys.gate("r", bucket), {b"someone else": time.time() * 1000 + 60_000})
    with workers(redis_server.url, settings, 1, "-c", "2"):
        send_unreleased(redis_server.url, app, "k")
        wait_until(lambda: redis_client.llen(keys.gate("w", bucket)) == 1, timeout=30)
        assert runs_of(redis_client) == []
        with open_store(app) as store:
            store.scripts.slot_end(
                keys=keys.slot_keys(bucket),
                args=[b"someone else", bucket, store.keys.wakeup_channel],
            )
        wait_until(lambda: ended(redis_client) == 1, timeout=30, what="the task ran")
    (run,) = runs_of(redis_client)
    assert run["id"] == "unreleased-1"
    assert held_slots(redis_client, app, "k") == {}


def test_a_worker_runs_tasks_whose_slot_headers_are_crafted(
    make_app, redis_server, redis_client
) -> None:
    """Published past the gate (stock kombu), each with one of the crafted headers, to a
    prefork worker: every task runs once, and the worker lives on."""
    app = make_app()
    sender = make_app(broker_transport="redis")
    with celery_process("worker", redis_server.url, None, "-c", "2") as worker:
        sent = []
        # lone surrogates make JSON no reader takes: that message is a dead letter
        # before any task hook sees it (worker/poison.py)
        for n, value in enumerate(value for value in CRAFTED if value != ["\ud800", "\udfff"]):
            task_id = f"crafted-{n}"
            message = app.amqp.create_task_message(
                task_id, "tests.worker_app.remember", (), {"label": str(n)}
            )
            with sender.producer_or_acquire() as producer:
                producer.publish(
                    message.body,
                    exchange="",
                    routing_key="default",
                    headers={**message.headers, SLOT_HEADER: value},
                    serializer="json",
                    **message.properties,
                )
            sent.append(task_id)
        wait_until(
            lambda: sorted(run["id"] for run in runs(redis_client)) == sorted(sent),
            timeout=30,
            abort=worker.exited,
            what="every crafted task ran",
        )
    assert "Traceback" not in worker.output


@contextmanager
def killable_worker(url: str, settings: dict[str, Any], name: str) -> Iterator[WatchedProcess]:
    """A prefork worker in a process group of its own (``os.killpg`` kills it whole)."""
    command = celery_command(
        "tests.worker_app",
        "worker",
        *("-l", "info", "-c", "1", "-n", f"{name}@%h", "--without-mingle", "--without-gossip"),
    )
    popen = spawn(command, worker_app_env(url, settings), root=REPO_ROOT, die_with_parent=True)
    process = WatchedProcess(popen, name)
    try:
        process.wait_for_output("ready.", 60)
        yield process
    finally:
        stop_group(popen, 15)
        process.wait()


def kill(process: subprocess.Popen[bytes]) -> float:
    """SIGKILL the worker's whole process group; when it was dead."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return time.time()


@pytest.mark.promise("concurrency-slot-back-after-lease")
def test_a_killed_workers_slot_comes_back_when_its_lease_ends(
    make_app, redis_server, redis_client
) -> None:
    """Limit 1, a lease of 6 s: a task runs on a worker that is killed (and is not
    delivered again for an hour); the next task starts on the other worker within the
    lease after the kill, never before it."""
    lease = 6.0
    settings = settings_of(
        lease=lease, limit=1, broker_transport_options={"visibility_timeout": 3600}
    )
    app = make_app(**settings)
    with ExitStack() as stack:
        pair = [
            stack.enter_context(killable_worker(redis_server.url, settings, f"w{n}"))
            for n in range(2)
        ]
        app.send_task(STAMPED, (60.0,), {"label": "killed"})
        first = wait_until(lambda: runs_of(redis_client), timeout=30, what="a start")[0]
        app.send_task(STAMPED, (0.5,), {"label": "next"})
        waiting = queue_keys(app).gate("w", bucket_of(STAMPED))
        wait_until(lambda: redis_client.llen(waiting) == 1, timeout=30, what="next waits")
        (victim,) = [worker for worker in pair if worker.pid == first["worker"]]
        killed_at = kill(victim.popen)
        wait_until(lambda: ended(redis_client) == 1, timeout=lease + 20, what="next done")
    after = [run for run in runs_of(redis_client) if run["label"] == "next"]
    assert len(after) == 1
    assert killed_at < after[0]["start"] < killed_at + lease + 4


#: The chaos run: how long, how often a worker is killed, how many workers.
CHAOS_SECONDS, KILL_EVERY, CHAOS_WORKERS = 60.0, 3.0, 6


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.promise("concurrency-at-most-n", "concurrency-slot-back-after-lease")
def test_chaos_a_worker_killed_every_few_seconds_never_lets_more_than_the_limit_run(
    make_app, redis_server, redis_client, tmp_path
) -> None:
    """Limit 3 on one limit key, tasks of 2 s (acks_late: a killed one is delivered
    again), six prefork workers, one SIGKILLed (its whole process group; one running a
    task) every 3 s and started again, for a minute: never more than three running at
    once, each killed task's slot back within the lease (6 s) of the kill or held by its
    redelivery, and every task done."""
    lease = 6.0
    restore = {
        "visibility_timeout": 5,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
    settings = settings_of(3, lease, broker_transport_options=restore)
    app = make_app(**settings)
    running = queue_keys(app).gate("r", bucket_of(STAMPED, "chaos"))
    env = worker_app_env(redis_server.url, settings)
    rng = random.Random(7)

    def start(n: int) -> subprocess.Popen[bytes]:
        command = celery_command(
            "tests.worker_app",
            "worker",
            *("-l", "info", "-c", "1", "-n", f"w{n}-{time.time()}@%h"),
            *("--without-mingle", "--without-gossip"),
        )
        log = tmp_path / f"w{n}-{time.time()}.log"
        return spawn(command, env, log, root=REPO_ROOT)

    fleet = [start(n) for n in range(CHAOS_WORKERS)]
    killed: dict[int, float] = {}
    checks: list[tuple[float, float, list[Run]]] = []  # (due, killed at, runs killed)
    late: list[str] = []
    try:
        sent = [
            app.send_task(STAMPED, (2.0,), {"label": str(n)}, headers={LIMIT_KEY_HEADER: "chaos"})
            for n in range(150)
        ]
        wait_until(lambda: runs_of(redis_client), timeout=60, what="a first start")
        ends, next_kill = time.monotonic() + CHAOS_SECONDS, time.monotonic() + KILL_EVERY
        while time.monotonic() < ends or checks:
            now = time.monotonic()
            if now >= next_kill and now < ends:
                # aimed: a worker running a task when there is one (chance alone hits
                # one about every other kill, too few for a minute's run)
                busy = {run["worker"] for run in runs_of(redis_client) if run["end"] is None}
                aimed = [n for n, process in enumerate(fleet) if process.pid in busy]
                n = rng.choice(aimed or range(len(fleet)))
                victim = fleet[n]
                killed[victim.pid] = kill(victim)
                going = [
                    run
                    for run in runs_of(redis_client)
                    if run["worker"] == victim.pid and run["end"] is None
                ]
                checks.append((now + lease + 1.5, killed[victim.pid], going))
                fleet[n] = start(n)
                next_kill = now + KILL_EVERY
            for check in [check for check in checks if check[0] <= now]:
                checks.remove(check)
                _, killed_at, going = check
                held = held_slots(redis_client, app, "chaos")
                later = {run["id"] for run in runs_of(redis_client) if run["start"] > killed_at}
                late += [
                    run["id"]
                    for run in going
                    if task_key(run["id"]) in held and run["id"] not in later
                ]
            time.sleep(0.1)  # the loop's tick: kills and checks fall due on the clock
        wait_until(
            lambda: (
                {run["id"] for run in runs_of(redis_client) if run["end"]}
                >= {result.id for result in sent}
            ),
            timeout=300,
            what="every task done",
        )
        wait_until(lambda: not redis_client.zcard(running), timeout=lease + 5, what="no slot")
    finally:
        for process in fleet:
            stop_group(process, 15)
    done = runs_of(redis_client)
    print(  # shown with -s: what the chaos did
        f"kills {len(killed)}, runs {len(done)}, killed mid-run "
        f"{sum(run['end'] is None for run in done)}, tasks {len(sent)}, "
        f"most at once {most_at_once(done, killed)}"
    )
    assert len(killed) >= CHAOS_SECONDS / KILL_EVERY - 1
    assert late == []
    assert most_at_once(done, killed) == 3
    assert sum(run["end"] is None for run in done) >= len(killed) / 2  # killed mid-run
