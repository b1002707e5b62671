"""``python -m benchmarks.poison_guard [--messages N] [--rounds R] [--output PATH]``: what
the worker's poison guard (celery_delayq/worker/poison.py) costs per message, as a ratio
to the same worker without it.

Two measurements, side by side in one run, on a private redis-server:

- A real ``celery worker -P solo`` (benchmarks/poison_guard_app.py) takes ``N`` small
  tasks queued before it starts, with the guard and without it (its step wrapping
  nothing), the two in turn for ``R`` rounds, each on a fresh queue. The worker times
  itself from the first task's start to the last one's end: per message, what taking,
  checking and dispatching a small task costs the worker (the task itself is one
  addition).
- In this process, on real messages taken by the transport's consumer (``basic_get``:
  consume.lua), each part of the guard's check alone: ``Guard.refusal`` on a message
  nobody decoded yet, kombu's ``decode()`` alone, ``Guard.refusal`` on an already
  decoded message (kombu caches the decoded body), and ``message.payload`` (what Celery's
  ``Request`` reads) once the guard has decoded the body. Celery decodes every task
  message's body in the worker's main process anyway (``Request.__init__`` reads
  ``message.payload``): the guard's decode is one Celery would have done a little later.

Writes nothing unless ``--output`` says where.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

from celery import Celery

from celery_delayq.testing import RedisServer, build_app, celery_command, spawn, wait_until
from celery_delayq.worker.poison import MAX_DEPTH, Guard, nested_deeper

from .pathological import code_version

ROOT = Path(__file__).resolve().parent.parent
TASK = "bench.small"
VARIANTS = ("guard", "no guard")


def publish(app: Celery, queue: str, count: int) -> None:
    """``count`` small tasks in ``queue``, as Celery publishes them."""
    with app.producer_or_acquire() as producer:
        for n in range(count):
            app.send_task(TASK, (n,), queue=queue, producer=producer)


def worker_run(server: RedisServer, app: Celery, variant: str, queue: str, count: int) -> float:
    """Seconds the worker took from its first task's start to its last task's end."""
    client = server.client()
    publish(app, queue, count)
    env = {
        **os.environ,
        "BROKER_URL": server.url,
        "QUEUE": queue,
        "MESSAGES": str(count),
        "POISON_GUARD": "on" if variant == "guard" else "off",
    }
    command = celery_command(
        "benchmarks.poison_guard_app",
        "worker", "-P", "solo", "-Q", queue, "-l", "warning",
        "--without-mingle", "--without-gossip", "--without-heartbeat",
    )  # fmt: skip
    process = spawn(command, env, root=ROOT, session=False)
    key = f"bench:guard:{queue}"
    try:
        seconds = wait_until(
            lambda: client.get(key),
            timeout=600,
            what=f"{count} tasks run ({variant})",
            abort=lambda: None if process.poll() is None else "the worker exited",
        )
        guarded = client.get(f"{key}:guarded")
    finally:
        process.terminate()
        process.wait(30)
    if guarded != (b"1" if variant == "guard" else b"0"):
        raise SystemExit(f"the {variant!r} worker's handler guarded: {guarded!r}")
    return float(seconds)


def taken_messages(channel: Any, app: Celery, queue: str, count: int) -> list[Any]:
    """``count`` messages taken by the transport's consumer (left unacknowledged)."""
    publish(app, queue, count)
    taken = [channel.basic_get(queue) for _ in range(count)]
    assert all(message is not None for message in taken)
    return taken


def nested_deeper_every_value(limit: int, *values: Any) -> bool:
    """The guard's nesting walk before it skipped scalars (every value went on its
    stack), kept to show what the change saved, side by side."""
    stack = [(value, 1) for value in values]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


WALKS = {
    "nesting walk alone (nested_deeper)": nested_deeper,
    "nesting walk before (every value on its stack)": nested_deeper_every_value,
}


def per_message_us(messages: list[Any], step: Callable[[Any], Any]) -> float:
    began = time.perf_counter()
    for message in messages:
        step(message)
    return (time.perf_counter() - began) / len(messages) * 1e6


def in_process(app: Celery, count: int, rounds: int) -> dict[str, float]:
    """Median microseconds per message of each part of the guard's check."""
    guard = Guard(consumer=None, on_task_received=lambda message: None, max_deliveries=100)
    parts: dict[str, list[float]] = {
        "refusal, body not yet decoded": [],
        "decode() alone": [],
        "refusal, body already decoded": [],
        "payload read after the guard": [],
        "nesting walk alone (nested_deeper)": [],
        "nesting walk before (every value on its stack)": [],
    }
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for r in range(rounds):
            fresh = taken_messages(channel, app, f"guard-micro-{r}-a", count)
            other = taken_messages(channel, app, f"guard-micro-{r}-b", count)
            for message in fresh:  # all pass: nothing goes to the dead letters
                assert guard.refusal(message) is None
            fresh = taken_messages(channel, app, f"guard-micro-{r}-c", count)
            parts["refusal, body not yet decoded"].append(per_message_us(fresh, guard.refusal))
            parts["decode() alone"].append(per_message_us(other, lambda m: m.decode()))
            parts["refusal, body already decoded"].append(per_message_us(fresh, guard.refusal))
            parts["payload read after the guard"].append(per_message_us(fresh, lambda m: m.payload))
            for name, walk in WALKS.items():
                assert not any(walk(MAX_DEPTH, m.headers, m.properties) for m in fresh)
                parts[name].append(
                    per_message_us(fresh, lambda m, w=walk: w(MAX_DEPTH, m.headers, m.properties))
                )
    return {name: statistics.median(times) for name, times in parts.items()}


@contextmanager
def bench_app(server: RedisServer) -> Iterator[Celery]:
    app = build_app("bench_guard", {"broker_url": server.url}, current=True)
    try:
        yield app
    finally:
        app.close()


def report(
    args: argparse.Namespace, runs: dict[str, list[float]], parts: dict[str, float], server: str
) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    per = {v: statistics.median(runs[v]) / (args.messages - 1) * 1e6 for v in VARIANTS}
    best = {v: min(runs[v]) / (args.messages - 1) * 1e6 for v in VARIANTS}
    lines = [
        f"Generated by `python -m benchmarks.poison_guard --messages {args.messages} "
        f"--rounds {args.rounds}` on {now}; {server}; {code_version()}; Celery "
        f"{version('celery')}, kombu {version('kombu')}, redis-py {version('redis')}; "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.1f} at the end.",
        "",
        f"A `celery worker -P solo`, {args.messages} small tasks queued, {args.rounds} rounds "
        "of each variant in turn; per message, from the first task's start to the last's end:",
        "",
        "| worker | median us/message | best us/message | each round (s) |",
        "|---|---:|---:|---|",
    ]
    for v in VARIANTS:
        rounds = ", ".join(f"{s:.2f}" for s in runs[v])
        lines.append(f"| {v} | {per[v]:.0f} | {best[v]:.0f} | {rounds} |")
    lines += [
        "",
        f"Ratio guard / no guard: {per['guard'] / per['no guard']:.3f} (medians), "
        f"{best['guard'] / best['no guard']:.3f} (best rounds).",
        "",
        f"In this process, per message ({args.micro} real messages taken by the transport's "
        f"consumer, medians of {args.rounds} rounds):",
        "",
        "| step | us/message | of the no-guard worker's us/message |",
        "|---|---:|---:|",
    ]
    for name, us in parts.items():
        lines.append(f"| {name} | {us:.1f} | {us / per['no guard'] * 100:.1f}% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000, help="tasks per worker run")
    parser.add_argument("--rounds", type=int, default=5, help="worker runs of each variant")
    parser.add_argument("--micro", type=int, default=5000, help="messages per in-process step")
    parser.add_argument("--output", type=Path, help="append the report to this file")
    args = parser.parse_args()
    runs: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with RedisServer() as server, bench_app(server) as app:
        info = server.client().info("server")
        for r in range(args.rounds):
            order = VARIANTS if r % 2 == 0 else VARIANTS[::-1]
            for v in order:
                queue = f"guard-{r}-{v.replace(' ', '-')}"
                runs[v].append(worker_run(server, app, v, queue, args.messages))
                print(f"round {r + 1} {v}: {runs[v][-1]:.2f} s", file=sys.stderr)
        parts = in_process(app, args.micro, args.rounds)
        text = report(args, runs, parts, f"Redis {info['redis_version']}")
    print(text)
    if args.output:
        with args.output.open("a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
