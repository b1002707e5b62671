"""``python -m benchmarks.consume_big [--sizes MB ...] [--rounds N] [--output PATH]``: what
taking one big message with ``consume.lua`` costs, as a ratio to a plain ``RPOP`` of the
same message.

With ``--bounds``, small messages at the script's bounds are measured too (the most it
decodes whole, in the costliest shapes; a big one it skims as far as it goes).

With ``--hostile``, messages of the same sizes shaped against the script's skim of the
envelope are measured too: a body of escaped quotes, headers of small numbers, spaces
between two keys (each is read whole once the skim gives up, as every message was before).

A worker on the Redis broker takes each message with one ``consume.lua`` call (the message
off its list and kombu's ``unacked`` entry written, in one step). Stock kombu takes it with
``BRPOP``. For each size, one real Celery task message (a string argument of that many
bytes, published by Celery on stock kombu: base64 body, Celery's headers) is taken
``--rounds`` times each way from a fresh private redis-server, alternately:

- ``RPOP`` of the message;
- ``consume.lua`` taking it and recording it (then its entry is dropped again);
- the floor of any script that takes a message and records kombu's entry in one step:
  ``RPOP`` inside a script, ``HSET`` of the entry (the message inside brackets), the message
  returned. Everything beyond it is what ``consume.lua`` spends reading the message.

Two times per call: the client's (send to reply parsed, what a worker waits for) and the
server's (SLOWLOG, ``slowlog-log-slower-than`` 0: the command's own run, without writing
the reply to the socket). The goal: a consume call's client time at most 1.5x the
``RPOP``'s, plus 0.5 ms (medians over the rounds); the floor shows how much of the rest no
one-step take can avoid (a script copies the message in, into the entry, and out).

It takes messages through the consumer of a channel of the transport (its
``consume_call``, its scripts, and where it has one, its naming of a message recorded
under a provisional tag), so the same file measures older code: run it from a checkout
of that code. Writes nothing unless
``--output`` says where.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis
from celery import Celery

from celery_delayq.brokers.redis.replies import Taken
from celery_delayq.testing import RedisServer

from .pathological import code_version

QUEUE = "bench"
PROBE = "bench-publish"  # where the publish through the transport goes
UNACKED, INDEX = "unacked", "unacked_index"
SIZES_MB = (0.5, 5.0, 20.0)
GOAL_RATIO, GOAL_SLACK_MS = 1.5, 0.5
#: The least a one-step take does: the message in, into kombu's entry, and out.
FLOOR = """
local message = redis.call('RPOP', KEYS[1])
redis.call('HSET', KEYS[2], 'tag', '[' .. message .. ', "", ""]')
return message
"""


@dataclass
class Sized:
    """The times of one message size: per call, client ms and server us."""

    size: int
    shape: str = ""
    #: What a publish of such a task through the transport, with its default settings,
    #: came to: "sent", or "refused" (delayq_max_message_size); "" for crafted shapes.
    publish: str = ""
    rpop_ms: list[float] = field(default_factory=list)
    consume_ms: list[float] = field(default_factory=list)
    rpop_us: list[int] = field(default_factory=list)
    consume_us: list[int] = field(default_factory=list)
    floor_ms: list[float] = field(default_factory=list)
    floor_us: list[int] = field(default_factory=list)

    def met(self) -> bool:
        rpop, consume = statistics.median(self.rpop_ms), statistics.median(self.consume_ms)
        return consume <= GOAL_RATIO * rpop + GOAL_SLACK_MS


def hostile(size: int) -> dict[str, bytes]:
    """Messages of about ``size`` bytes that the skim cannot follow to the end."""
    properties = b'"properties": {"delivery_tag": "t", "delivery_info": {}}'
    return {
        "escaped quotes": b'{"body": "' + b'\\"' * (size // 2) + b'", ' + properties + b"}",
        "numbers": b'{"headers": {"n": [' + b"1," * (size // 2) + b"1]}, " + properties + b"}",
        "spaces": b'{"body": "x",' + b" " * size + properties + b"}",
    }


def at_the_bounds() -> dict[str, bytes]:
    """Messages at the script's bounds: the most it reads whole (16 KiB) in the costliest
    shapes, and big ones it leaves to the consumer after skimming as far as it goes."""
    properties, most = b'"properties": {"delivery_tag": "t"}', 16_384
    return {
        "16 KiB of numbers": b'{"h": [' + b"1," * ((most - 60) // 2) + b"1], " + properties + b"}",
        "16 KiB of nested objects": b'{"a":' * (most // 5),
        "16 KiB of escaped quotes": (
            b'{"a": "' + b'\\"' * ((most - 60) // 2) + b'", ' + properties + b"}"
        ),
        "1 MB of short strings": b'{"h": [' + b'"a",' * 250_000 + b'"a"], ' + properties + b"}",
    }


def big_message(url: str, size: int) -> bytes:
    """A Celery task message with a ``size``-byte argument, as stock kombu publishes it."""
    app = Celery("bench", broker=url)
    app.send_task("bench.big", args=["x" * size], queue=QUEUE)
    raw = redis.Redis.from_url(url).rpop(QUEUE)
    assert raw is not None
    return raw


def last_duration(client: redis.Redis, command: bytes) -> int:
    """The SLOWLOG duration (us) of the latest ``command`` logged."""
    for entry in client.slowlog_get(8):
        if entry["command"].split(b" ", 1)[0].upper() == command:
            return int(entry["duration"])
    raise SystemExit(f"no {command!r} in the SLOWLOG")


def take(consumer: Any, client: redis.Redis) -> tuple[float, int]:
    """Take the message in QUEUE as the consumer does (consume.lua, and when it recorded
    the message under its provisional tag, the consumer's naming of it): client ms, Redis
    us."""
    keys, args = consumer.consume_call([(QUEUE, QUEUE)])
    began = time.perf_counter()
    reply = consumer.scripts.consume(keys, args)
    redis_us = last_duration(client, b"EVALSHA")
    named = getattr(consumer, "named", None)  # not in older code
    if named is not None and len(args) > 2 and reply[2] == args[1].encode():
        assert named(Taken.of(reply), args[1], QUEUE, QUEUE, QUEUE) is not None
        redis_us += last_duration(client, b"EVALSHA")
    client_ms = (time.perf_counter() - began) * 1000
    assert reply[1] and (reply[2] or reply[3]), reply[2:]  # taken, or left with a reason
    return client_ms, redis_us


def measure(
    consumer: Any, client: redis.Redis, message: bytes, rounds: int, shape: str = ""
) -> Sized:
    sized = Sized(len(message), shape)
    for script_field in dataclasses.fields(consumer.scripts):  # no NOSCRIPT round measured
        client.script_load(getattr(consumer.scripts, script_field.name).script)
    floor = client.register_script(FLOOR)
    client.script_load(FLOOR)
    for _ in range(rounds):
        client.lpush(QUEUE, message)
        began = time.perf_counter()
        taken = client.rpop(QUEUE)
        sized.rpop_ms.append((time.perf_counter() - began) * 1000)
        sized.rpop_us.append(last_duration(client, b"RPOP"))
        assert taken == message
        client.lpush(QUEUE, message)
        client_ms, redis_us = take(consumer, client)
        sized.consume_ms.append(client_ms)
        sized.consume_us.append(redis_us)
        client.delete(QUEUE, UNACKED, INDEX)
        client.lpush(QUEUE, message)
        began = time.perf_counter()
        assert floor([QUEUE, UNACKED]) == message
        sized.floor_ms.append((time.perf_counter() - began) * 1000)
        sized.floor_us.append(last_duration(client, b"EVALSHA"))
        client.delete(UNACKED)
    return sized


def run(sizes_mb: list[float], rounds: int, shapes: bool, bounds: bool) -> tuple[list[Sized], str]:
    results = []
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=600)
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 1024)
        version = str(client.info("server")["redis_version"])
        app = Celery("bench", broker=server.url)
        app.conf.broker_transport = "celery_delayq.transport:Transport"
        app.conf.broker_transport_options = {"socket_timeout": 600}
        with app.connection_for_write() as connection:
            consumer = connection.default_channel.consumer
            for mb in sizes_mb:
                message = big_message(server.url, int(mb * 1_000_000 * 3 / 4))  # base64: 4/3
                results.append(measure(consumer, client, message, rounds))
                results[-1].publish = published(app, client, int(mb * 1_000_000 * 3 / 4))
                print(row(results[-1]), flush=True)
                for shape, crafted in hostile(int(mb * 1_000_000)).items() if shapes else ():
                    results.append(measure(consumer, client, crafted, rounds, shape))
                    print(row(results[-1]), flush=True)
            for shape, crafted in at_the_bounds().items() if bounds else ():
                results.append(measure(consumer, client, crafted, rounds, shape))
                print(row(results[-1]), flush=True)
        client.close()
    return results, version


def published(app: Celery, client: redis.Redis, size: int) -> str:
    """Publish a task with a ``size``-byte argument through the transport, at once:
    "refused" when its size limit refuses it (code without one sends it), else "sent"."""
    try:
        app.send_task("bench.big", args=["x" * size], queue=PROBE)
    except Exception as exc:  # noqa: BLE001 - the refusal is the measurement
        if type(exc).__name__ != "MessageTooLarge":
            raise
        if client.llen(PROBE):
            raise SystemExit(f"a refused message was queued: {exc}") from exc
        return "refused"
    client.delete(PROBE)
    return "sent"


def size_of(size: int) -> str:
    return f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def row(sized: Sized) -> str:
    med = statistics.median
    rpop_ms, consume_ms = med(sized.rpop_ms), med(sized.consume_ms)
    rpop_us, consume_us = med(sized.rpop_us), med(sized.consume_us)
    floor_ms, floor_us = med(sized.floor_ms), med(sized.floor_us)
    shape = f", {sized.shape}" if sized.shape else ""
    best = min(sized.consume_us) / max(min(sized.floor_us), 1)
    return (
        f"| {size_of(sized.size)}{shape} | {rpop_ms:.2f} | {consume_ms:.2f} | "
        f"{consume_ms / rpop_ms:.2f}x | {floor_ms / rpop_ms:.2f}x | {rpop_us:,.0f} | "
        f"{consume_us:,.0f} | {consume_us / max(rpop_us, 1):.1f}x | "
        f"{floor_us / max(rpop_us, 1):.1f}x | {best:.2f}x | "
        f"{'met' if sized.met() else 'NOT met'} | {sized.publish or '-'} |"
    )


def render(results: list[Sized], rounds: int, version: str, took: float) -> str:
    lines = [
        "# Consuming a big message: consume.lua against a plain RPOP of the same message",
        "",
        f"Generated by `python -m benchmarks.consume_big` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s); medians of "
        f"{rounds} rounds a size, RPOP, consume.lua and the floor script in turn (ratios: "
        f"to the RPOP); Redis {version}; "
        f"{code_version()}; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}.",
        "",
        "| message | RPOP ms (client) | consume.lua ms (client) | ratio | floor ratio "
        "| RPOP us (SLOWLOG) | consume.lua us (SLOWLOG) | ratio | floor ratio "
        "| consume.lua / floor (SLOWLOG, best of the rounds) "
        "| goal: client ≤ 1.5x RPOP + 0.5 ms | publish through the transport (defaults) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        *(row(sized) for sized in results),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="*", default=list(SIZES_MB), help="MB")
    parser.add_argument("--rounds", type=int, default=7, help="calls each way per size")
    parser.add_argument("--hostile", action="store_true", help="shapes against the skim too")
    parser.add_argument("--bounds", action="store_true", help="shapes at the script's bounds")
    parser.add_argument("--output", type=Path)
    options = parser.parse_args()
    started = time.time()
    results, version = run(options.sizes, options.rounds, options.hostile, options.bounds)
    report = render(results, options.rounds, version, time.time() - started)
    print(report)
    if options.output:
        options.output.write_text(report)


if __name__ == "__main__":
    main()
