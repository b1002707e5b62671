"""``python -m benchmarks.schedule_cost [--quick] [--output PATH]``: what storing one
delayed message costs Redis.

Side by side on one private redis-server, in alternating rounds (median of each), the
same kombu-sized messages stored by:

- ``LPUSH``, kombu's own publish of a message that is due now (the physical floor: one
  command, no Lua);
- ``EVAL`` of ``HSET`` + ``ZADD`` into one big sorted set (the least a Lua store with an
  index by due time does);
- ``schedule.lua`` (``DelayedStore.schedule``), with due times that increase (a
  ``countdown`` stream), in random order within an hour, or all in the same millisecond (a
  flood); pipelined, as many publishers keep a busy Redis, and one call per round trip, as
  one ``apply_async`` loop calls it;
- ``schedule_many.lua``, chunks of 200 (``celery_delayq.schedule_many``).

For each: Redis time per message (the ``usec`` of every top-level command in ``INFO
commandstats``, divided by the messages), Redis memory per message (``MEMORY USAGE`` of every
key), and what the store adds over the same message in a kombu list. Then what the store
adds at payload sizes from 96 to 216 B, 8 B apart (jemalloc rounds every allocation up to a
size class, 16 B apart there, so one size can cost a class more or less than the next; the
mean is what a mix of sizes costs), for inline records (JSON envelopes, the usual case) and
prefixed ones (core/layout/record.py; here the same envelope after one space). Writes
benchmarks/RESULTS-schedule.md on a full run.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import redis

from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import RedisServer

from .report import server_version
from .standalone import parse_options, publish
from .store_tools import keys_memory, make_store, payload, task_id

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-schedule.md"
TARGET_US = 10.0
TARGET_BYTES = 150.0
CHUNK = 200
#: A due time well in the future (2027-01-15), so nothing is ever due during a run.
FAR_MS = 1_800_000_000_000
HOUR_MS = 3_600_000
#: Payload sizes and messages per size of the memory sweep (full run; --quick: two sizes).
SWEEP_SIZES = range(96, 224, 8)
SWEEP_COUNT = 20_000
#: The minimal Lua store the issue compares against: a record and one big index.
HSET_ZADD = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 0
"""


@dataclass
class Reading:
    redis_us: float  # Redis time per message
    bytes: float  # Redis memory per message
    nested: dict[str, float]  # commands run inside scripts, per message


def messages(count: int, order: str, size: int | None = None, lead: bytes = b"") -> list[Scheduled]:
    """``count`` messages (kombu-sized, else ``size`` bytes, ``lead`` first) with uuid task
    ids, due in ``order``: "increasing" (72 ms apart for 50,000, as a countdown stream),
    "random" (the same times shuffled) or "same" (all in one millisecond)."""
    dues = [FAR_MS + (i * HOUR_MS) // count for i in range(count)]
    if order == "random":
        random.Random(7).shuffle(dues)
    elif order == "same":
        dues = [FAR_MS] * count
    return [
        Scheduled("bench", f"m{i}", task_id(i), due, "bench", payload(i, size, lead))
        for i, due in enumerate(dues)
    ]


def lpush(client: redis.Redis, store: DelayedStore, sent: list[Scheduled]) -> None:
    for start in range(0, len(sent), 1000):
        with client.pipeline(transaction=False) as pipe:
            for message in sent[start : start + 1000]:
                pipe.lpush("bench", message.payload)
            pipe.execute()


def hset_zadd(client: redis.Redis, store: DelayedStore, sent: list[Scheduled]) -> None:
    script = client.register_script(HSET_ZADD)
    for start in range(0, len(sent), 1000):
        with client.pipeline(transaction=False) as pipe:
            for m in sent[start : start + 1000]:
                script(["P:{bench}:msg", "P:{bench}:due"], [m.task_id, m.due_ms, m.payload], pipe)
            pipe.execute()


def pipelined(client: redis.Redis, store: DelayedStore, sent: list[Scheduled]) -> None:
    store.schedule_many(sent)


def one_by_one(client: redis.Redis, store: DelayedStore, sent: list[Scheduled]) -> None:
    for message in sent:
        store.schedule(message)


def chunks(client: redis.Redis, store: DelayedStore, sent: list[Scheduled]) -> None:
    for start in range(0, len(sent), CHUNK):
        store.schedule_chunk(sent[start : start + CHUNK])


Store = Callable[[redis.Redis, DelayedStore, list[Scheduled]], None]


def sides(count: int) -> dict[str, tuple[Store, str, int]]:
    """Each side: how it stores, the order of its due times, and how many messages."""
    single = max(count // 4, 500)  # a round trip each: slower, so fewer
    return {
        "LPUSH (kombu's publish, due now)": (lpush, "increasing", count),
        "EVAL HSET + ZADD (one big zset)": (hset_zadd, "increasing", count),
        "schedule.lua, increasing due times, pipelined": (pipelined, "increasing", count),
        "schedule.lua, random due times, pipelined": (pipelined, "random", count),
        "schedule.lua, one due time, pipelined": (pipelined, "same", count),
        "schedule.lua, increasing due times, a round trip each": (one_by_one, "increasing", single),
        f"schedule_many.lua, chunks of {CHUNK}": (chunks, "increasing", count),
    }


def measure(client: redis.Redis, store: DelayedStore, how: Store, sent: list[Scheduled]) -> Reading:
    client.flushall()
    how(client, store, sent[:10])  # warm up: scripts loaded, connection open
    client.flushall()
    used = keys_memory(client)
    client.config_resetstat()
    how(client, store, sent)
    stats = client.info("commandstats")
    top = ("cmdstat_evalsha", "cmdstat_lpush")  # the rest ran inside the scripts
    total_us = sum(stats[name]["usec"] for name in top if name in stats)
    nested = {
        name.removeprefix("cmdstat_"): value["calls"] / len(sent)
        for name, value in stats.items()
        if name not in top and not name.startswith(("cmdstat_config", "cmdstat_info"))
    }
    grown = keys_memory(client) - used
    return Reading(total_us / len(sent), grown / len(sent), nested)


def memory_by_size(
    client: redis.Redis, store: DelayedStore, sizes: Sequence[int], count: int
) -> list[tuple[int, float, float, float]]:
    """For each payload size: bytes per message in a kombu list, and what the store adds
    over that for inline records and for prefixed ones."""
    rows = []
    for size in sizes:
        inline = messages(count, "increasing", size)
        listed = measure(client, store, lpush, inline).bytes
        prefixed = messages(count, "increasing", size, lead=b" ")
        rows.append(
            (
                size,
                listed,
                measure(client, store, pipelined, inline).bytes - listed,
                measure(client, store, pipelined, prefixed).bytes - listed,
            )
        )
    return rows


def main() -> None:
    options = parse_options(__doc__)
    count, rounds = (4_000, 1) if options.quick else (50_000, 5)
    sweep = (SWEEP_SIZES[:2], 2_000) if options.quick else (SWEEP_SIZES, SWEEP_COUNT)
    readings: dict[str, list[Reading]] = {}
    started = time.time()
    with RedisServer() as server:
        client = server.client()
        store = make_store(server.url)
        plan = sides(count)
        sent = {name: messages(n, order) for name, (_, order, n) in plan.items()}
        for round_ in range(rounds):
            for name, (how, _, _) in plan.items():
                reading = measure(client, store, how, sent[name])
                readings.setdefault(name, []).append(reading)
                print(f"round {round_ + 1}: {name}: {reading.redis_us:.2f} us", flush=True)
        by_size = memory_by_size(client, store, *sweep)
    report = render(readings, count, rounds, time.time() - started) + render_sizes(by_size)
    publish(report, options, DEFAULT_OUTPUT)


def render(readings: dict[str, list[Reading]], count: int, rounds: int, took: float) -> str:
    def median_us(name: str) -> float:
        return statistics.median(r.redis_us for r in readings[name])

    def median_bytes(name: str) -> float:
        return statistics.median(r.bytes for r in readings[name])

    names = list(readings)
    floor, minimal, ours = names[0], names[1], names[2]
    lines = [
        "# What storing one delayed message costs Redis",
        "",
        f"Generated by `python -m benchmarks.schedule_cost` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s); {count:,} "
        f"kombu-sized messages ({len(payload(0))} B) per side and round, median of {rounds} "
        f"alternating rounds, one private redis-server ({server_version()}) on the same 2 "
        "cores. Redis time: the "
        "`usec` of every top-level command in `INFO commandstats` per message.",
        "",
        "| side | Redis µs per message | vs LPUSH | vs EVAL HSET + ZADD | "
        "bytes per message | store adds over LPUSH (B) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        us, grown = median_us(name), median_bytes(name)
        lines.append(
            f"| {name} | {us:.2f} | {us / median_us(floor):.1f}x | "
            f"{us / median_us(minimal):.2f}x | {grown:,.0f} | {grown - median_bytes(floor):,.0f} |"
        )
    nested = readings[ours][-1].nested
    by_count = sorted(nested.items(), key=lambda item: -item[1])
    calls = ", ".join(f"{name} {per:.2f}" for name, per in by_count)
    us, added = median_us(ours), median_bytes(ours) - median_bytes(floor)
    lines += [
        "",
        f"Commands a `schedule.lua` call runs (increasing due times, per message): {calls}.",
        "",
        f"Target: schedule.lua <= {TARGET_US:.0f} µs per call with the store adding "
        f"< {TARGET_BYTES:.0f} B: {us:.1f} µs ({us / median_us(minimal):.2f}x EVAL HSET + "
        f"ZADD on this machine) and {added:.0f} B.",
        "",
    ]
    return "\n".join(lines)


def render_sizes(rows: list[tuple[int, float, float, float]]) -> str:
    inline, prefixed = [row[2] for row in rows], [row[3] for row in rows]
    lines = [
        "",
        f"## What the store adds, by payload size ({rows[0][0]}-{rows[-1][0]} B)",
        "",
        "| payload (B) | bytes per message in a kombu list | inline record adds (B) | "
        "prefixed record adds (B) |",
        "|---:|---:|---:|---:|",
        *(f"| {size} | {listed:.0f} | {a:.0f} | {b:.0f} |" for size, listed, a, b in rows),
        f"| mean | | {statistics.mean(inline):.0f} | {statistics.mean(prefixed):.0f} |",
        f"| most | | {max(inline):.0f} | {max(prefixed):.0f} |",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
