"""Helpers of the test suite that are not fixtures: real ``celery`` subprocesses, the
command line run in-process, and the tasks of ``tests.worker_app``.

Waiting, publishing and quiescence come from ``celery_delayq.testing`` (shared with the
benchmarks and the chaos harness); what needs click or this suite's worker app is here.
"""

from __future__ import annotations

import base64
import inspect
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
import types
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import amqp
import pytest
import redis
from celery import Celery
from celery.result import AsyncResult
from click.testing import CliRunner, Result
from kombu import Connection, Queue

from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.connect import open_store
from celery_delayq.cli import delayq
from celery_delayq.core.handover.claims import CLAIM_HEADER
from celery_delayq.core.handover.publishing import Outgoing
from celery_delayq.core.store import Scheduled
from celery_delayq.testing import (
    CHROMIUM_FLAGS,
    celery_command,
    chromium_binary,
    publish,
    spawn,
    wait_until,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
#: A broker URL nothing listens on, for apps and processes that must never reach a server.
NOWHERE = "redis://127.0.0.1:9/0"

#: The task of ``tests.worker_app`` that records each execution (see ``runs``).
REMEMBER = "tests.worker_app.remember"

#: The task of the periodic entries' tests, registered on ``periodic_app`` (tests/conftest.py).
PERIODIC_TASK = "tests.periodic.tick"


def remember(app: Celery, label: str, **options: Any) -> AsyncResult:
    """Send ``tests.worker_app.remember(label)`` as ``app`` (made current first)."""
    return publish(app, REMEMBER, label, **options)


def remember_delayed(
    app: Celery, *countdowns: float, label: str | None = None, **options: Any
) -> tuple[list[AsyncResult], int]:
    """``remember`` once per countdown (labelled ``c<countdown>`` unless ``label``), and
    how many of them surely waited in the store: those whose ETA still lay ahead when
    their publish returned. One that falls due while it is sent (a loaded machine) is
    rightly published at once, so a test bounds the store's count between the two."""
    sent, kept = [], 0
    for countdown in countdowns:
        before = time.time()
        sent.append(remember(app, label or f"c{countdown}", countdown=countdown, **options))
        kept += time.time() < before + countdown
    return sent, kept


def publish_limited(
    app: Celery, task: str, n: int, key: str | None = None, queue: str | None = None
) -> None:
    """Publish ``n`` messages of the flow-controlled task ``task`` (registered on first
    use, publishing only), with the limit key ``key`` (None: none), to ``queue`` (None:
    the default queue)."""
    if task not in app.tasks:

        @app.task(name=task, shared=False)
        def limited(*args: Any) -> None: ...

    headers = {} if key is None else {"delayq_limit_key": key}
    for _ in range(n):
        app.tasks[task].apply_async(headers=headers, queue=queue)


def noop_task(app: Celery) -> Any:
    """The task ``tests.noop`` of ``app`` (registered on first use): publishing it tests
    the publish path alone; no worker runs it."""
    if "tests.noop" in app.tasks:
        return app.tasks["tests.noop"]

    @app.task(name="tests.noop")
    def noop(*args: Any) -> Any:
        return args

    return noop


def take_all(app: Celery, queue: str) -> list[Any]:
    """Every message in a RabbitMQ queue now, taken off it (``basic_get``)."""
    taken = []
    with app.connection_for_write() as connection:
        channel = connection.channel()
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            taken.append(message)
        channel.close()
    return taken


def runs(client: redis.Redis) -> list[dict[str, Any]]:
    """Executions recorded by tests.worker_app tasks, oldest first."""
    return [json.loads(raw) for raw in client.lrange("test:runs", 0, -1)]


def pending_runs(app: Celery, queue: str = "default") -> list[tuple[datetime, Any]]:
    """(occurrence, first argument) of each periodic occurrence pending in the store for
    ``queue``, in occurrence order: which version of its entry each one runs."""
    found = []
    with open_store(app) as store:
        for message in store.pending(queue=queue, limit=100_000):
            envelope = json.loads(message.record.payload)
            args = json.loads(base64.b64decode(envelope["body"]))[0]
            occurrence = datetime.fromisoformat(envelope["headers"]["delayq-occurrence"])
            found.append((occurrence, args[0] if args else None))
    return sorted(found, key=lambda each: each[0])


def invoke(app: Celery, *args: str, input: str | None = None) -> Result:
    """``celery -A <app> delayq <args>`` in this process, through click's test runner;
    the result reads as click 8.2's: ``stdout`` and ``stderr`` apart, ``output`` both."""
    obj = types.SimpleNamespace(app=app)
    if not CLICK_MIXES_STDERR:
        return CliRunner().invoke(delayq, list(args), obj=obj, input=input)
    result = CliRunner(mix_stderr=False).invoke(delayq, list(args), obj=obj, input=input)
    result.__class__ = BothOutputs
    return result


#: Click 8.1 (the last for Python 3.9) mixes stderr into stdout unless told not to, and
#: then its ``output`` is stdout alone; click 8.2 keeps them apart and ``output`` has both.
CLICK_MIXES_STDERR = "mix_stderr" in inspect.signature(CliRunner.__init__).parameters


class BothOutputs(Result):
    """A click 8.1 result whose ``output`` is stdout then stderr, as in click 8.2."""

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def worker_app_env(
    broker_url: str, settings: dict[str, Any] | None, record_url: str | None = None
) -> dict[str, str]:
    """The environment ``tests.worker_app`` reads: broker, extra Celery settings, and the
    Redis that records executions (default: the broker's)."""
    return dict(
        os.environ,
        BROKER_URL=broker_url,
        DELAYQ_SETTINGS=json.dumps(settings or {}),
        RECORD_URL=record_url or broker_url,
        BEAT_SCHEDULE_FILE=os.path.join(tempfile.mkdtemp(prefix="delayq-beat-"), "schedule"),
    )


def run_celery(
    broker_url: str, settings: dict[str, Any] | None, *args: str
) -> subprocess.CompletedProcess[str]:
    """``celery -A tests.worker_app <args>`` in a process of its own, run to its end."""
    return subprocess.run(
        celery_command("tests.worker_app", *args),
        cwd=REPO_ROOT,
        env=worker_app_env(broker_url, settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


def fetch_metrics(port: int) -> str:
    """The text a Prometheus exporter on this host serves at ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return str(response.read().decode())


#: Sample name -> its labels (sorted pairs) -> value.
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def scrape(app: Celery, alive_within: float | None = None) -> str:
    """What the delayq collector exposes for ``app`` now (needs prometheus_client)."""
    import prometheus_client

    from celery_delayq.metrics import DelayqCollector

    registry = prometheus_client.CollectorRegistry(auto_describe=False)
    registry.register(DelayqCollector(app, alive_within))
    return str(prometheus_client.generate_latest(registry).decode())


def parse_metrics(text: str) -> tuple[dict[str, str], Samples]:
    """Family name -> type, and sample name -> sorted labels -> value."""
    from prometheus_client import parser

    types: dict[str, str] = {}
    samples: Samples = {}
    for family in parser.text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[labels] = sample.value
    return types, samples


class WatchedProcess:
    """A subprocess whose output (stdout and stderr) a thread reads from the start, so
    the test can wait for a line with a real deadline and see everything it printed."""

    def __init__(self, popen: subprocess.Popen[bytes], name: str) -> None:
        self.popen = popen
        self.name = name
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.append(line.decode(errors="replace").replace("\r\n", "\n"))

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def output(self) -> str:
        """Everything it printed so far."""
        return "".join(self._lines)

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        """Wait until ``text`` appears in the output; fail at once if the process ends
        (and all its output has been read) without printing it."""

        def ended() -> str | None:
            if self._reader.is_alive() or text in self.output:
                return None
            return f"{self.name} exited ({self.popen.poll()}):\n{self.output}"

        try:
            wait_until(lambda: text in self.output, timeout=timeout, what=repr(text), abort=ended)
        except TimeoutError:
            raise AssertionError(
                f"{self.name} did not print {text!r} within {timeout:g}s:\n{self.output}"
            ) from None

    def exited(self) -> str | None:
        """Why a wait for this process's work is pointless (``wait_until``'s ``abort``)."""
        code = self.popen.poll()
        return None if code is None else f"{self.name} exited with {code}:\n{self.output}"

    def kill(self) -> None:
        self.popen.kill()

    def terminate(self) -> None:
        self.popen.terminate()

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the process to exit and for its output to be read to the end (a
        child process that outlives it may hold the pipe: then at most 10 s more)."""
        code = self.popen.wait(timeout)
        self._reader.join(10)
        return code

    def stop(self) -> None:
        """SIGTERM (a warm shutdown), then SIGKILL if it is still there after 15 s."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.popen.kill()
        self.wait()


def watched(command: list[str], name: str, env: Mapping[str, str] | None = None) -> WatchedProcess:
    """``command`` started from the repository root (``celery_delayq.testing.spawn``),
    a child of the test in its session, its output read as it comes."""
    popen = spawn(command, env, root=REPO_ROOT, session=False, die_with_parent=False)
    return WatchedProcess(popen, name)


@contextmanager
def celery_process(
    command: str,
    broker_url: str,
    settings: dict[str, Any] | None = None,
    *args: str,
    ready: str = "ready.",
    timeout: float = 30.0,
    record_url: str | None = None,
    log_level: str | None = "info",
    mingle: bool = False,
) -> Iterator[WatchedProcess]:
    """Run ``celery -A tests.worker_app <command>`` until the block ends.

    Waits until the ``ready`` line is in its log (failing as soon as the process exits,
    or after ``timeout``); the process is stopped at the end whatever happens, so a
    failing test leaves nothing running. A worker starts ``--without-mingle`` (its
    start-up exchange with other workers waits a second for replies) unless ``mingle``.
    """
    process = watched(
        celery_command(
            "tests.worker_app",
            command,
            *(["-l", log_level] if log_level else []),
            *(["--without-mingle"] if command == "worker" and not mingle else []),
            *args,
        ),
        f"celery {command}",
        worker_app_env(broker_url, settings, record_url),
    )
    try:
        process.wait_for_output(ready, timeout)
        yield process
    finally:
        process.stop()


def standalone_mover(
    broker_url: str, settings: dict[str, Any] | None = None
) -> AbstractContextManager[WatchedProcess]:
    """``celery -A tests.worker_app delayq mover`` until the block ends, once running."""
    return celery_process(
        "delayq", broker_url, settings, "mover", ready="standalone mover running", log_level=None
    )


def schedule_overdue(app: Celery, queue: str, count: int) -> None:
    """``count`` messages, each ``{"n": i}`` with task id ``t<i>``, already due, bound
    for ``queue`` through the default exchange (as a producer's AMQP publish would be)."""
    with open_store(app) as store:
        due = store.server_time_ms() - 1
        store.schedule_many(
            Scheduled(
                queue,
                f"m{i}",
                f"t{i}",
                due,
                destination("", queue),
                envelope(
                    amqp.Message(
                        b'{"n": %d}' % i, application_headers={"id": f"t{i}"}, delivery_mode=2
                    )
                ),
            )
            for i in range(count)
        )


def ready_in(app: Celery, queue: str) -> int:
    """How many messages are ready in a RabbitMQ queue."""
    with app.connection_for_write() as connection:
        _, ready, _ = Queue(queue)(connection.default_channel).queue_declare(passive=True)
    return int(ready)


#: Seconds a taken message stays taken in the broker-channel tests.
VISIBILITY = 1


@contextmanager
def channel_of(app_or_url: Any, **options: Any) -> Iterator[Any]:
    """A Redis broker channel: of the app's transport (ours), or of stock kombu for a URL.
    Taken messages expire after ``VISIBILITY``, and restores scan on every call."""
    options = {"visibility_timeout": VISIBILITY, "unacked_restore_interval": 0, **options}
    if isinstance(app_or_url, str):
        connection = Connection(app_or_url, transport_options=options)
    else:
        app_or_url.conf.broker_transport_options = options
        connection = app_or_url.connection_for_write()
    with connection:
        yield connection.default_channel


def drain(channel: Any, timeout: float = 5.0) -> bool:
    """One delivery (True), or none within ``timeout`` (False)."""
    try:
        channel.connection.client.drain_events(timeout=timeout)
    except socket.timeout:
        return False
    return True


def missing_browser(reason: str) -> NoReturn:
    """Skip a browser test for want of ``reason`` (chromium, Playwright), or fail it
    where ``DELAYQ_REQUIRE_BROWSER`` is set (CI installs both)."""
    if os.environ.get("DELAYQ_REQUIRE_BROWSER"):
        pytest.fail(f"DELAYQ_REQUIRE_BROWSER is set, but {reason}")
    pytest.skip(reason)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's chromium on PATH, headless, driven by Playwright (its own browser
    downloads are not used); ``missing_browser`` without either."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_browser("Playwright is not installed (pip install playwright)")
    executable = chromium_binary()
    if executable is None:
        missing_browser("no chromium on PATH (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def claim(store: Any, queue_name: str, owner: str, lease_ms: int) -> list[Outgoing]:
    """What a mover's claim step takes (then "killed" by not going on); its hold on the
    queue as claimer lasts as long as its lease."""
    handover = store.handover
    keys = store.keys.for_queue(queue_name)
    log = handover.release_log
    reply = handover.scripts.claim_due(
        keys=keys.handover_keys(),
        args=[*keys.page_args(), 100, 1 << 20, owner, lease_ms, 5, owner, lease_ms, log],
    )
    pairs = zip(reply[CLAIM_HEADER::2], reply[CLAIM_HEADER + 1 :: 2])
    return [Outgoing.from_record(key, raw, keys.own_list) for key, raw in pairs]


def killed_mid_handover(app: Celery, queue_name: str, killed_after: str, count: int) -> None:
    """Leave the state a mover SIGKILLed after ``killed_after`` ("claim", "publish" or
    "ack") leaves with the ``count`` due messages of ``queue_name``, then run another
    mover's pass once the dead mover's lease is over."""
    with open_store(app) as store:
        claimed = claim(store, queue_name, "dead-mover", lease_ms=200)
        assert len(claimed) == count
        if killed_after in ("publish", "ack"):
            publisher = store.handover.publisher
            report = publisher.settle(publisher.send(claimed))
            assert sorted(report.confirmed) == sorted(m.key for m in claimed)
        if killed_after == "ack":
            keys = store.keys.for_queue(queue_name)
            store.handover.scripts.ack_claimed(
                keys=keys.handover_keys(),
                args=[*keys.page_args(), "dead-mover", count, *report.confirmed],
            )
        lease_over = store.server_time_ms() + 200
        wait_until(lambda: store.server_time_ms() > lease_over, what="the lease is over")
        store.move_all_due()  # another mover's pass
