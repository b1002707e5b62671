"""``python -m benchmarks.web_pages [--quick] [--output PATH]``: how long the web
dashboard's pages take with 1,000,000 tasks pending.

One private redis-server holds a million real Celery messages (``schedule_many``; 10% in
a second queue, due over the coming week; one rare task name among them). The dashboard
is served over HTTP by ``celery delayq web``'s own server in this process, and each page
is fetched 5 times (the median and the slowest are reported) against the 200 ms target:
the first page, a page deep in the listing, a queue, a due window, a rare task name and
an argument search (both stop at their time budget and offer to search further), a task,
and the overview; the full doctor page (which reads the whole store) is reported apart.
Writes benchmarks/RESULTS-web.md on a full run.

``--hostile [--count N]``: the dashboard against hostile requests (issue 25): N tasks
(100,000 by default) due in one millisecond, then a crafted cursor, a page deep in that
instant, the doctor page, a task with a 2 MB argsrepr and a 400-digit ``after=``; for
each, the Redis time it cost (INFO commandstats, reset before it), the commands it ran
and the slowest one (SLOWLOG, logging every command). Prints a table; runs against any
version of the package (a deep cursor is written the way that version's pages write it).
"""

from __future__ import annotations

import logging
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from celery import Celery

import celery_delayq
from celery_delayq.brokers.connect import open_store
from celery_delayq.ops.browse import Cursor
from celery_delayq.testing import RedisServer, build_app, free_port
from celery_delayq.web.app import make_web_server

from .report import server_version
from .standalone import parse_options, publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-web.md"
TARGET_MS = 200.0
WEEK = 7 * 86400
FETCHES = 5


def make_app(url: str) -> Celery:
    return build_app(
        "bench-web", {"broker_url": url, "task_ignore_result": True, "task_default_queue": "celery"}
    )


def calls(count: int, queue: str, offset: int) -> Iterator[tuple[Any, Any, Any]]:
    """Reminders for users, due over the coming week."""
    for n in range(offset, offset + count):
        countdown = 60 + (n * 7919) % WEEK  # spread, not in id order
        options = {"countdown": countdown, "queue": queue}
        yield (f"user-{n}@example.com",), {"template": "trial-ending", "n": n}, options


def noop(*args: Any, **kwargs: Any) -> None:
    """The tasks' body: only their messages matter here."""


def fill(app: Celery, count: int) -> float:
    send, rare = (
        app.task(name="proj.emails.send_reminder")(noop),
        app.task(name="proj.audit.rare")(noop),
    )
    began = time.perf_counter()
    billing = count // 10
    celery_delayq.schedule_many(send, calls(count - billing - 1, "celery", 0))
    celery_delayq.schedule_many(send, calls(billing, "billing", count))
    rare.apply_async(("needle",), countdown=WEEK - 60)
    return time.perf_counter() - began


def fetch_once(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=300) as response:
        response.read()
    return (time.perf_counter() - began) * 1000


def fetch_ms(url: str) -> list[float]:
    times = []
    for _ in range(FETCHES):
        began = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
            if response.status != 200:
                raise SystemExit(f"{url}: HTTP {response.status}")
        times.append((time.perf_counter() - began) * 1000)
    return times


def pages(app: Celery, count: int) -> dict[str, str]:
    """The page paths to time (some need a cursor or an id from the store)."""
    with open_store(app) as store:
        now = store.server_time_ms() / 1000
        middle = store.pending(due_after=now + WEEK / 2, limit=1)[0]
        some_task = store.pending(limit=1)[0].task_id
    deep = Cursor.encode(middle.position)
    return {
        "first page of the scheduled tasks": "/scheduled",
        f"a page halfway down ({count // 2:,} tasks in)": f"/scheduled?from={deep}",
        "one queue (billing, 10%)": "/scheduled?queue=billing",
        "a due window (3 to 4 days ahead)": "/scheduled?after=3d&before=4d",
        "a rare task name (a 0.1 s scan, then 'search further')": "/scheduled?task=proj.audit.rare",
        "a search in the arguments": f"/scheduled?q={quote('user-123456@')}",
        "one task": f"/task/{some_task}",
        "overview (the doctor's checks but the store scan)": "/?refresh=0",
    }


def render(rows: list[tuple[str, list[float]]], doctor_ms: float, count: int, fill_s: float) -> str:
    lines = [
        "# The web dashboard's pages with many tasks pending",
        "",
        f"`python -m benchmarks.web_pages`: {count:,} tasks pending (filled in {fill_s:.0f} s "
        f"with `schedule_many`), each page fetched {FETCHES} times over HTTP from the "
        f"dashboard's own server; target: under {TARGET_MS:.0f} ms. {server_version()}.",
        "",
        "| page | median | slowest | target |",
        "|---|---:|---:|---|",
    ]
    for name, times in rows:
        verdict = "met" if max(times) < TARGET_MS else "missed"
        lines.append(
            f"| {name} | {statistics.median(times):.1f} ms | {max(times):.1f} ms | {verdict} |"
        )
    lines += [
        "",
        f"The doctor page, whose consistency check reads every key of the store, took "
        f"{doctor_ms:,.0f} ms: the overview leaves that check out, and links to the page.",
        "",
    ]
    return "\n".join(lines)


HOSTILE_DEFAULT = 100_000


def fill_tie(app: Celery, count: int) -> tuple[int, str]:
    """``count`` reminders due in one millisecond an hour from now, and one task whose
    argsrepr is 2 MB; the due ms and that task's id."""
    send = app.task(name="proj.emails.send_reminder")(noop)
    due = time.time() + 3600
    eta = datetime.fromtimestamp(due, timezone.utc)
    calls: Iterator[tuple[Any, Any, Any]] = (
        ((f"user-{n}@example.com",), {}, {"eta": eta}) for n in range(count)
    )
    celery_delayq.schedule_many(send, calls)
    huge = repr(["y" * 100] * 20_000)
    big = send.apply_async((1,), countdown=7200, argsrepr=huge).id
    with open_store(app) as store:
        return store.pending(limit=1)[0].due_ms, str(big)


def deep_cursor(app: Celery, due_ms: int, passed: int) -> str:
    """The cursor of a page ``passed`` tasks into the instant, as this version writes it."""
    try:
        from celery_delayq.core.results import Position  # noqa: F401 - keyset cursors
    except ImportError:  # the cursor of old: a due ms and how many of it were passed
        return Cursor(due_ms, passed).encode()  # type: ignore[call-arg,attr-defined]
    with open_store(app) as store:
        return Cursor.encode(store.pending(limit=passed)[-1].position)  # type: ignore[call-arg,arg-type]


def redis_cost(client: Any, url: str) -> dict[str, Any]:
    """One request, and what it cost Redis: total command time, calls, slowest call."""
    client.config_resetstat()
    client.slowlog_reset()
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=300) as response:
            status = response.status
            response.read()
    except urllib.error.HTTPError as error:
        status = error.code
    wall_ms = (time.perf_counter() - began) * 1000
    stats = client.info("commandstats")
    slowest = max((entry["duration"] for entry in client.slowlog_get(100_000)), default=0)
    return {
        "status": status,
        "wall_ms": wall_ms,
        "redis_ms": sum(s["usec"] for s in stats.values()) / 1000,
        "calls": sum(s["calls"] for s in stats.values()),
        "slowest_ms": slowest / 1000,
    }


def hostile_main(count: int) -> None:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with RedisServer() as redis_server:
        app = make_app(redis_server.url)
        due_ms, big = fill_tie(app, count)
        client = redis_server.client()
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 100_000)
        server = make_web_server(app, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_port}"
        for warm in ("/", "/scheduled"):  # templates compiled before anything is timed
            fetch_once(base + warm)
        requests = {
            "the first page": "/scheduled",
            "crafted cursor `from=0.100000`": "/scheduled?from=0.100000",
            f"a page {count // 2:,} tasks into the instant": "/scheduled?from="
            + quote(deep_cursor(app, due_ms, count // 2)),
            "/doctor (GET)": "/doctor",
            "a task with a 2 MB argsrepr": f"/task/{big}",
            "`after=` of 400 digits": "/scheduled?after=" + "1" * 400,
        }
        try:
            rows = [(name, redis_cost(client, base + path)) for name, path in requests.items()]
        finally:
            server.shutdown()
            server.server_close()
        version = client.info("server")["redis_version"]
    print(f"{count:,} tasks due in one ms; Redis {version}; {datetime.now(timezone.utc):%Y-%m-%d}")
    print("| request | HTTP | wall | Redis time | calls | slowest call |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['status']} | {r['wall_ms']:,.0f} ms | {r['redis_ms']:,.1f} ms "
            f"| {r['calls']} | {r['slowest_ms']:,.2f} ms |"
        )


def main() -> None:
    if "--hostile" in sys.argv:
        sys.argv.remove("--hostile")
        count = HOSTILE_DEFAULT
        if "--count" in sys.argv:
            at = sys.argv.index("--count")
            count = int(sys.argv[at + 1])
            del sys.argv[at : at + 2]
        hostile_main(count)
        return
    options = parse_options(__doc__)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    count = 20_000 if options.quick else 1_000_000
    with RedisServer() as redis_server:
        app = make_app(redis_server.url)
        fill_s = fill(app, count)
        port = free_port()
        server = make_web_server(app, "127.0.0.1", port)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{port}"
        try:
            doctor_ms = fetch_once(base + "/doctor")
            rows = [(name, fetch_ms(base + path)) for name, path in pages(app, count).items()]
        finally:
            server.shutdown()
            server.server_close()
    report = render(rows, doctor_ms, count, fill_s)
    publish(report, options, DEFAULT_OUTPUT)
    limit = 2 * TARGET_MS  # a quick run on a busy machine: only a gross failure
    slow = [name for name, times in rows if statistics.median(times) >= limit]
    if options.quick and slow:
        raise SystemExit(f"pages over {limit:.0f} ms with {count:,} pending: {slow}")


if __name__ == "__main__":
    main()
