"""Two more pathological shapes of ``python -m benchmarks.pathological`` (``--big-bodies``,
``--never-firing``; ``--quick`` runs small forms of both after the default shapes).

- **big bodies**: for each size (by default 63 kB, just under the default limit, 0.5, 5 and
  20 MB), first one real Celery task of that size is published with a countdown through
  the transport, with its default settings: a size above ``delayq_max_message_size`` is
  refused there (``MessageTooLarge``, nothing stored), and the row says so; then real
  Celery task messages of that size, ``BIG_COUNT`` or as many as make ``BIG_BYTES``
  (``consume_big.big_message``), are scheduled (``schedule.lua``), moved when due by one
  mover pass (``move_all_due``) together with ``OTHERS`` ordinary messages of another queue
  due at the same instant, then taken by the transport's atomic consume
  (``consume_big.take``). Every script call's Redis time is read from SLOWLOG; the floor of
  a call that must copy the message is a plain ``LPUSH`` and ``RPOP`` of the same bytes in
  the same run, and the least script of each step (``SCRIPT_FLOORS``: a script copies its
  argument in, and what it writes or returns, where a plain command keeps the bytes it
  read). The other queue's lateness (when it was all delivered after the pass began) is set
  against the same pass without the big messages.
- **never-firing entries**: 1,000 periodic interval entries, of which 10 never fire, half
  crontabs (``* 1 31 3 sun`` in Antarctica/Troll) and half rules (``FREQ=SECONDLY;
  BYMONTH=2;BYMONTHDAY=30``), against 1,000 that all fire; beat's
  scheduler (``celery_delayq.beat:Scheduler``) is driven in-process with ``_pass(now)``, a
  pass every 5 s of its clock; per pass, beat's CPU time and the longest script call.

Each shape runs on a fresh private redis-server; the goal is the issue's: no script call
over 5 ms of Redis CPU, other queues' lateness within 10%.
"""

from __future__ import annotations

import signal
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import redis
from celery.schedules import crontab

from celery_delayq.beat import Scheduler
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.periodic.entry import PeriodicEntry
from celery_delayq.periodic.registry import EntryRegistry
from celery_delayq.testing import RedisServer, build_app

from .consume_big import FLOOR, INDEX, UNACKED, big_message, last_duration, size_of, take
from .pathological import (
    DEFAULT_BUDGET,
    GOAL_SCRIPT_US,
    OTHER_QUEUE,
    QUEUE,
    Phase,
    SlowLog,
    code_version,
    longest_script_us,
    one_pass,
)
from .store_tools import payload, server_time_ms, task_id

SIZES_MB = (0.063, 0.5, 5.0, 20.0)
#: Big messages of each size (at least BIG_COUNT, or as many as make BIG_BYTES: enough that
#: a move call could carry several), and the other queue's ordinary messages due with them.
BIG_COUNT, BIG_BYTES, OTHERS = 3, 4_000_000, 20_000
#: Passes of the other queue alone and beside the big messages, in turn (medians).
ROUNDS = 3
#: The SLOWLOG threshold (us): at 0 a pass of 20,000 messages (Redis logs the commands a
#: script runs too) would overflow the log; a call this short is not the one that matters.
#: The calls of a big message are logged at 0 (``every_call``).
THRESHOLD_US = 100
ENTRIES, NEVER_FIRING, PASSES = 1_000, 10, 6
GOAL_LATENESS = 1.10
#: A pass longer than this is stopped (older code searched a never-firing crontab on).
PASS_LIMIT_S = 120
#: Entries that never fire, taken in turn: a crontab whose every time falls in a DST gap,
#: and a rule of 30 February (dateutil walks every day to the year 9999 for it).
NEVER = [
    {
        "schedule": crontab(
            minute="*", hour="1", day_of_month="31", month_of_year="3", day_of_week="sun"
        ),
        "timezone": "Antarctica/Troll",
    },
    {"schedule": "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30", "timezone": "UTC"},
]


@dataclass
class BigRun:
    """One size: the Redis time (us) of each call, by step, and the lateness."""

    size: int
    count: int = 0
    #: The publish's error when the transport refused a message of this size, else "".
    refused: str = ""
    schedule_us: list[int] = field(default_factory=list)
    move_us: int = 0
    #: The move calls on the big messages' own queue (those SLOWLOG kept: over 100 us).
    move_big_us: list[int] = field(default_factory=list)
    consume_us: list[int] = field(default_factory=list)
    move_alone_us: int = 0
    #: The least script doing each step's copies (``SCRIPT_FLOORS``), per call.
    floor_us: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    lpush_us: list[int] = field(default_factory=list)
    rpop_us: list[int] = field(default_factory=list)
    other_s: float = 0.0
    other_alone_s: float = 0.0


def big_bodies(
    sizes_mb: tuple[float, ...],
    count: int,
    others: int,
    big_bytes: int = BIG_BYTES,
    limit: int | None = None,
) -> tuple[list[BigRun], str]:
    runs = []
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=600)
        version = str(client.info("server")["redis_version"])
        store = DelayedStore(client, KeySpace(), 500, move_call_budget=DEFAULT_BUDGET)
        app = build_app("bench", {"broker_url": server.url})
        app.conf.broker_transport_options = {"socket_timeout": 600}
        slowlog = SlowLog(client, THRESHOLD_US)
        with app.connection_for_write() as connection:
            consumer = connection.default_channel.consumer
            for mb in sizes_mb:
                message = big_message(server.url, int(mb * 1_000_000 * 3 / 4))  # base64: 4/3
                refused = publish_refused(server.url, store, int(mb * 1e6 * 3 / 4), limit)
                if refused:
                    runs.append(BigRun(len(message), refused=refused))
                else:
                    many = max(count, -(-big_bytes // len(message)))
                    runs.append(
                        one_size(server.url, store, slowlog, consumer, message, many, others)
                    )
                print(big_row(runs[-1]), flush=True)
        store.close()
    return runs, version


def publish_refused(url: str, store: DelayedStore, size: int, limit: int | None) -> str:
    """Publish one task with a ``size``-byte argument and a countdown through the
    transport, with its default settings (``limit``: its ``delayq_max_message_size``
    instead): the error when it is refused, else "" (and the stored message cancelled).
    Code without a size limit stores it."""
    settings: dict[str, Any] = {"broker_url": url}
    if limit is not None:  # code without the setting refuses the name
        settings["delayq_max_message_size"] = limit
    app = build_app("bench-publish", settings, current=True)
    try:
        app.send_task("bench.big", args=["x" * size], queue=QUEUE, countdown=3600, task_id="p")
    except Exception as exc:  # noqa: BLE001 - the refusal is the measurement
        if type(exc).__name__ != "MessageTooLarge":
            raise
        if store.pending_counts([QUEUE])[QUEUE]:
            raise SystemExit(f"a refused message was stored: {exc}") from exc
        return str(exc)
    store.cancel("p")
    return ""


def one_size(
    url: str,
    store: DelayedStore,
    slowlog: SlowLog,
    consumer: Any,
    message: bytes,
    count: int,
    others: int,
) -> BigRun:
    """Passes of the other queue alone and beside ``count`` big messages scheduled, in
    turn; then the big messages of the last pass consumed, and the floor."""
    client, run = store.client, BigRun(len(message), count)
    alone_s, beside_s = [], []
    for _ in range(ROUNDS):
        seconds, move_us, _ = other_queue_pass(url, store, slowlog, others)
        alone_s.append(seconds)
        run.move_alone_us = max(run.move_alone_us, move_us)
        client.delete(QUEUE)  # the last round's are consumed below
        with every_call(slowlog):
            for i in range(count):
                due = now_due(client)
                store.schedule(Scheduled(QUEUE, f"b{i}", task_id(i), due, QUEUE, message))
                run.schedule_us.append(last_duration(client, b"EVALSHA"))
        seconds, move_us, big_us = other_queue_pass(url, store, slowlog, others)
        beside_s.append(seconds)
        run.move_us = max(run.move_us, move_us)
        run.move_big_us += big_us
    run.other_alone_s, run.other_s = statistics.median(alone_s), statistics.median(beside_s)
    if client.llen(QUEUE) != count:
        raise SystemExit(f"lost big messages: {client.llen(QUEUE)} of {count} moved")
    with every_call(slowlog):
        for _ in range(count):
            run.consume_us.append(take(consumer, client)[1])
            client.delete(UNACKED, INDEX)
        for _ in range(count):  # the floor: the same bytes in and out, no script
            client.lpush(QUEUE, message)
            run.lpush_us.append(last_duration(client, b"LPUSH"))
            assert client.rpop(QUEUE) == message
            run.rpop_us.append(last_duration(client, b"RPOP"))
        script_floors(client, message, count, run)
    return run


#: The least script of each step: the message written with its due time, moved to its
#: list, taken with kombu's entry written (consume_big's floor). KEYS: hash, due set, list,
#: unacked.
SCRIPT_FLOORS = {
    "schedule": "redis.call('HSET', KEYS[1], 'm', ARGV[1]) "
    "return redis.call('ZADD', KEYS[2], 0, 'm')",
    "move": "redis.call('RPUSH', KEYS[3], redis.call('HGET', KEYS[1], 'm')) "
    "redis.call('ZREM', KEYS[2], 'm') return redis.call('HDEL', KEYS[1], 'm')",
    "consume": FLOOR.replace("KEYS[1]", "KEYS[3]").replace("KEYS[2]", "KEYS[4]"),
}


def script_floors(client: redis.Redis, message: bytes, count: int, run: BigRun) -> None:
    """Run each floor script ``count`` times on ``message``, noting its Redis time."""
    keys = ["floor:hash", "floor:due", QUEUE, UNACKED]
    scripts = {step: client.register_script(text) for step, text in SCRIPT_FLOORS.items()}
    for text in SCRIPT_FLOORS.values():
        client.script_load(text)  # no NOSCRIPT round measured
    for _ in range(count):
        for step, script in scripts.items():
            script(keys, [message] if step == "schedule" else [])
            run.floor_us[step].append(last_duration(client, b"EVALSHA"))
        client.delete(*keys)


@contextmanager
def every_call(slowlog: SlowLog) -> Iterator[None]:
    """Every command logged in the block (the SLOWLOG read before and after it)."""
    slowlog.drain(Phase())
    slowlog.client.config_set("slowlog-log-slower-than", 0)
    try:
        yield
    finally:
        slowlog.client.config_set("slowlog-log-slower-than", THRESHOLD_US)
        slowlog.drain(Phase())


def now_due(client: redis.Redis) -> int:
    return server_time_ms(client) - 1


def other_queue_pass(
    url: str, store: DelayedStore, slowlog: SlowLog, others: int
) -> tuple[float, int, list[int]]:
    """Schedule the other queue's messages due now, run one mover pass: (seconds until
    the other queue was all delivered, the pass's longest script call, us, and the
    durations of its calls on the big messages' queue)."""
    due = now_due(store.client)
    store.schedule_many(
        Scheduled(OTHER_QUEUE, f"o{i}", task_id(10_000 + i), due, OTHER_QUEUE, payload(i))
        for i in range(others)
    )
    slowlog.drain(Phase())  # the load: not measured here
    seconds = one_pass(url, store, others)[1]
    longest, big = 0, []
    big_tag = b"{" + QUEUE.encode() + b"}"
    for entry in slowlog.new_entries():
        words = entry["command"].split()
        if len(words) > 1 and slowlog.names.get(words[1].decode(), "").endswith(".lua"):
            duration = int(entry["duration"])
            longest = max(longest, duration)
            if big_tag in entry["command"]:
                big.append(duration)
    store.client.delete(OTHER_QUEUE)
    return seconds, longest, big


def big_row(run: BigRun) -> str:
    if run.refused:
        return f"| {size_of(run.size)} | 0 | refused at publish: {run.refused} |" + " - |" * 11
    floor = statistics.median(run.lpush_us) + statistics.median(run.rpop_us)
    big = run.move_big_us or [0]
    calls = {
        "schedule": max(run.schedule_us),
        "move": run.move_us,
        "consume": max(run.consume_us),
    }
    lateness = run.other_s / max(run.other_alone_s, 1e-6)
    met = max(calls.values()) <= GOAL_SCRIPT_US and lateness <= GOAL_LATENESS
    to_floor = " / ".join(f"{us / floor:.1f}x" for us in calls.values())
    to_script = " / ".join(
        f"{us / max(min(run.floor_us[step]), 1):.1f}x" for step, us in calls.items()
    )
    scripts = " / ".join(f"{min(run.floor_us[step]):,}" for step in calls)
    return (
        f"| {size_of(run.size)} | {run.count} | {calls['schedule']:,} | "
        f"{run.move_alone_us:,} / {run.move_us:,} | {len(big)}: {statistics.median(big):,.0f} / "
        f"{max(big):,} | {calls['consume']:,} | "
        f"{statistics.median(run.lpush_us):,.0f} + {statistics.median(run.rpop_us):,.0f} | "
        f"{to_floor} | {scripts} | {to_script} | "
        f"{run.other_alone_s:.3f} | {run.other_s:.3f} | {lateness:.2f}x | "
        f"{'met' if met else 'NOT met'} |"
    )


@dataclass
class BeatRun:
    """One side of the periodic shape: beat's CPU per pass, the longest call per pass."""

    cpu_s: list[float] = field(default_factory=list)
    longest_us: list[int] = field(default_factory=list)
    note: str = ""


class PassTooLong(Exception):
    pass


@contextmanager
def limited(seconds: int) -> Iterator[None]:
    """Stop the block with ``PassTooLong`` after ``seconds`` (a pass that never ends)."""

    def stop(*_: Any) -> None:
        raise PassTooLong

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def beat_passes(entries: int, never: int, passes: int) -> BeatRun:
    run = BeatRun()
    with RedisServer() as server:
        app = build_app("bench", {"broker_url": server.url})
        anchor = datetime.now(timezone.utc)
        with open_store(app) as store:
            registry = EntryRegistry(store.client, store.keys)
            for i in range(entries):
                shape: dict[str, Any] = {"schedule": 60.0, "timezone": "UTC"}
                if i < never:
                    shape = dict(NEVER[i % len(NEVER)])
                entry = PeriodicEntry(f"e{i:04d}", "bench.tick", anchor=anchor, **shape)
                registry.put(entry)
        client = redis.Redis.from_url(server.url, socket_timeout=600)
        slowlog = SlowLog(client, THRESHOLD_US)
        beat = Scheduler(app)
        try:
            for k in range(passes):
                began = time.process_time()
                try:
                    with limited(PASS_LIMIT_S):
                        beat._pass(anchor + timedelta(seconds=5 * k))
                except PassTooLong:
                    run.note = f"pass {k + 1} stopped after {PASS_LIMIT_S} s"
                run.cpu_s.append(time.process_time() - began)
                phase = Phase()
                slowlog.drain(phase)
                run.longest_us.append(longest_script_us(phase))
                if run.note:
                    break
        finally:
            beat.close()
    return run


def never_firing(entries: int, never: int, passes: int) -> dict[str, BeatRun]:
    runs = {}
    for label, count in ((f"{never} never fire", never), ("all fire", 0)):
        print(f"{entries:,} periodic entries, {label}", flush=True)
        runs[label] = beat_passes(entries, count, passes)
    return runs


def beat_rows(runs: dict[str, BeatRun]) -> list[str]:
    rows = []
    for label, run in runs.items():
        later = run.cpu_s[1:] or run.cpu_s
        rows.append(
            f"| {label} | {run.cpu_s[0]:.2f} | {statistics.median(later):.3f} | "
            f"{run.longest_us[0]:,} | {max(run.longest_us[1:] or [0]):,} | {run.note or '-'} |"
        )
    return rows


def render(
    big: list[BigRun], beats: dict[str, BeatRun], version: str, sizes: tuple[int, int, int]
) -> str:
    """``sizes``: big messages a size, the other queue's messages, periodic entries."""
    count, others, entries = sizes
    lines = [
        f"Redis {version}; {code_version()}. Big bodies: one published with a countdown "
        f"through the transport with its default settings (refused or not), then {count} "
        f"messages a size, or as many as make {BIG_BYTES / 1e6:g} MB, in one "
        f"queue, {others:,} ordinary messages of another queue due with them; Redis us per "
        "call (SLOWLOG); the floor is the median LPUSH + RPOP of the same bytes; lateness: "
        "when the other queue was all delivered after the pass began, alone and beside the "
        f"big messages (medians "
        f"of {ROUNDS} passes each, in turn). Periodic entries: a beat pass every 5 s of its "
        "clock, driven in-process; CPU is the beat process's, the longest call is Redis's. "
        f"SLOWLOG threshold {THRESHOLD_US} us, 0 around a big message's schedule, consume "
        "and floor calls.",
        "",
        "| size | messages | schedule.lua longest us | move pass longest call us (other queue "
        "alone / beside big) | the big queue's move calls: how many, median / longest us | "
        "consume longest us | "
        "floor LPUSH + RPOP us | schedule / move / "
        "consume to LPUSH + RPOP | floor scripts us (best) | schedule / move / consume to "
        "floor script | other queue alone s | beside big s | lateness ratio "
        "| goal (5 ms, 1.1x) |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---|",
        *(big_row(run) for run in big),
    ]
    if beats:
        lines += [
            "",
            f"| {entries:,} periodic entries | first pass CPU s | later passes CPU s (median) "
            "| first pass longest call us | later passes longest call us | note |",
            "|---|---:|---:|---:|---:|---|",
            *beat_rows(beats),
        ]
        never, fire = beats.values()
        if len(never.cpu_s) > 1 and len(fire.cpu_s) > 1:
            lines += [
                "",
                f"- never-firing against all firing: later passes' CPU "
                f"{statistics.median(never.cpu_s[1:]) / statistics.median(fire.cpu_s[1:]):.2f}x; "
                f"longest call {max(never.longest_us) / max(max(fire.longest_us), 1):.2f}x.",
            ]
    return "\n".join(lines) + "\n"


def main(
    big: bool,
    beat: bool,
    quick: bool,
    big_sizes: tuple[float, ...] | None = None,
    limit: int | None = None,
) -> str:
    """Run the shapes asked for (``big_sizes``: MB, default ``SIZES_MB``; ``limit``: the
    ``delayq_max_message_size`` of the publish, default the transport's); return their
    report."""
    sizes, count, others = ((0.05,), 1, 2_000) if quick else (SIZES_MB, BIG_COUNT, OTHERS)
    sizes = tuple(big_sizes) if big_sizes else sizes
    entries, never, passes = (100, 2, 3) if quick else (ENTRIES, NEVER_FIRING, PASSES)
    version, big_runs, beat_runs = "?", [], {}
    if big:
        big_runs, version = big_bodies(sizes, count, others, 0 if quick else BIG_BYTES, limit)
    if beat:
        beat_runs = never_firing(entries, never, passes)
    report = render(big_runs, beat_runs, version, (count, others, entries))
    print(report, flush=True)
    return report
