"""``python -m benchmarks.move_cost [--quick] [--output PATH]``: what moving one due
message costs Redis, against the least any move of the store's records could cost.

Side by side on one private redis-server, in alternating rounds (median of each): the store
is filled with kombu-sized messages already due (all in one millisecond, as a burst, or
spread over a second), then drained by one caller in a tight loop of script calls, 500
messages a call, by:

- a script that reads a page's records and pushes them whole: the floor for this layout
  (a record, a page entry and a list push per message);
- ``move_due.lua`` (``DelayedStore.move_all_due``), with its destination checks,
  ``x-expires``, delay keys, duplicates and lateness histogram, on the usual records: JSON
  envelopes, stored inline and pushed whole (core/layout/record.py);
- ``move_due.lua`` on prefixed records, whose prefix it cuts off before the push: what
  every move cost before records were inline, and still costs for a record that names a
  priority sub-list, a queue expiry or a delay key, or whose payload is not a JSON object
  (here: the same envelope after one space).

For each: messages per second (wall, one caller) and Redis time per message (``usec`` of
``EVALSHA`` in ``INFO commandstats``). Writes benchmarks/RESULTS-move.md on a full run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import redis

from celery_delayq.core.store import DelayedStore
from celery_delayq.testing import RedisServer

from .report import server_version
from .standalone import parse_options, publish
from .store_tools import fill, make_store, server_time_ms

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-move.md"
BATCH = 500
#: Moves the first BATCH records, page by page, to the list "bench"; how many it moved.
FLOOR = """
local MSG, PAGES, prefix, limit = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local moved = 0
while moved < limit do
  local page = redis.call('ZRANGE', PAGES, 0, 0)
  if not page[1] then break end
  local page_key = prefix .. page[1]
  local keys = redis.call('ZRANGE', page_key, 0, limit - moved - 1)
  local records = redis.call('HMGET', MSG, unpack(keys))
  redis.call('LPUSH', 'bench', unpack(records))
  redis.call('HDEL', MSG, unpack(keys))
  redis.call('ZREMRANGEBYRANK', page_key, 0, #keys - 1)
  if redis.call('EXISTS', page_key) == 0 then redis.call('ZREM', PAGES, page[1]) end
  moved = moved + #keys
end
return moved
"""

Drain = Callable[[redis.Redis, DelayedStore], int]


def floor_drain(client: redis.Redis, store: DelayedStore) -> int:
    script = client.register_script(FLOOR)
    keys = store.keys.for_queue("bench")
    moved = 0
    while True:
        n = int(script(keys=[keys.messages, keys.pages], args=[keys.page_prefix, BATCH]))
        if not n:
            return moved
        moved += n


def move_due(client: redis.Redis, store: DelayedStore) -> int:
    moved = 0
    while True:
        result = store.move_all_due()
        if not result.moved:
            return moved
        moved += result.moved


#: The side the others are compared with.
OURS = "move_due.lua, inline records (JSON envelopes)"
#: Each side: how it drains, and what the payloads start with (a space before the JSON
#: envelope makes the record prefixed).
SIDES: dict[str, tuple[Drain, bytes]] = {
    "floor: records pushed whole": (floor_drain, b""),
    OURS: (move_due, b""),
    "move_due.lua, prefixed records (cut before the push)": (move_due, b" "),
}


def measure(
    server: RedisServer, side: tuple[Drain, bytes], count: int, spread_ms: int
) -> tuple[float, float]:
    """Messages per second and Redis µs per message of one drain of ``count`` messages."""
    drain, lead = side
    client = server.client()
    client.flushall()
    store = make_store(server.url, BATCH)
    due = server_time_ms(client) - 10_000
    fill(store, "bench", count, due, spread_ms=spread_ms, lead=lead)
    client.config_resetstat()
    began = time.perf_counter()
    moved = drain(client, store)
    seconds = time.perf_counter() - began
    if moved != count or client.llen("bench") != count:
        raise SystemExit(f"moved {moved} of {count}")
    usec = client.info("commandstats")["cmdstat_evalsha"]["usec"]
    return moved / seconds, usec / moved


def main() -> None:
    options = parse_options(__doc__)
    count, rounds = (5_000, 1) if options.quick else (100_000, 5)
    layouts = {"one millisecond": 0, "spread over 1 s": 1000}
    readings: dict[tuple[str, str], list[tuple[float, float]]] = {}
    started = time.time()
    with RedisServer() as server:
        for round_ in range(rounds):
            for layout, spread in layouts.items():
                for name, side in SIDES.items():
                    rate, us = measure(server, side, count, spread)
                    readings.setdefault((layout, name), []).append((rate, us))
                    print(f"round {round_ + 1}: {layout}: {name}: {rate:,.0f}/s", flush=True)
    report = render(readings, count, rounds, time.time() - started)
    publish(report, options, DEFAULT_OUTPUT)


def render(
    readings: dict[tuple[str, str], list[tuple[float, float]]], count: int, rounds: int, took: float
) -> str:
    lines = [
        "# What moving one due message costs Redis",
        "",
        f"Generated by `python -m benchmarks.move_cost` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s); {count:,} "
        f"kombu-sized messages already due, drained in calls of {BATCH} by one caller in a "
        f"tight loop, median of {rounds} alternating rounds, one private redis-server "
        f"({server_version()}) on the same 2 cores.",
        "",
        "| due times | side | messages/s | Redis µs per message | inline move_due vs this side |",
        "|---|---|---:|---:|---:|",
    ]
    for (layout, name), values in readings.items():
        rate = statistics.median(v[0] for v in values)
        us = statistics.median(v[1] for v in values)
        ours = statistics.median(v[0] for v in readings[(layout, OURS)])
        lines.append(f"| {layout} | {name} | {rate:,.0f} | {us:.2f} | {ours / rate:.2f}x |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
