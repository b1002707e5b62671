"""``python -m benchmarks.first_publish [--quick] [--output PATH]``: what the first delayed
publish costs a fresh process, against vanilla Celery.

A web server pays this once in every worker process it starts: the first
``apply_async(countdown=...)`` imports the transport and what a publish needs, opens the
connection and loads the scripts. Side by side on one private redis-server, in alternating
rounds, each round a fresh ``python`` process per side with bytecode already cached (a
warm-up process per side runs first): the app is built with Celery imported, then the first
``send_task(countdown=60)`` is timed, then a second one. Goal: celery-delayq's first publish
costs at most vanilla's plus 10 ms (medians). Writes benchmarks/RESULTS-first-publish.md on
a full run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from celery_delayq.testing import RedisServer

from .report import server_version
from .standalone import parse_options, publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-first-publish.md"
ALLOWANCE_MS = 10.0
TRANSPORTS = {
    "vanilla Celery (kombu's Redis transport)": None,
    "celery-delayq": "celery_delayq.transport:Transport",
}
#: Run in a fresh interpreter: Celery imported and the app built, then two delayed
#: publishes timed; prints their times in milliseconds as JSON.
PROCESS = """
import json, sys, time
from celery import Celery
app = Celery("first", broker=sys.argv[1], set_as_current=True)
if sys.argv[2]:
    app.conf.broker_transport = sys.argv[2]
started = time.perf_counter()
app.send_task("first.publish", countdown=60)
first = time.perf_counter()
app.send_task("first.publish", countdown=60)
second = time.perf_counter()
print(json.dumps([(first - started) * 1000, (second - first) * 1000]))
"""


def one_process(url: str, transport: str | None, env: dict[str, str]) -> tuple[float, float]:
    """The first and second delayed publish of a fresh process, in milliseconds."""
    output = subprocess.run(
        [sys.executable, "-c", PROCESS, url, transport or ""],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    first, second = json.loads(output.splitlines()[-1])
    return first, second


def main() -> None:
    options = parse_options(__doc__)
    rounds = 5 if options.quick else 30
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in TRANSPORTS}
    started = time.time()
    with RedisServer() as server, tempfile.TemporaryDirectory() as bytecode:
        # Bytecode cached for every module, wherever it is installed (an editable checkout
        # too), even where the environment says not to write it: a web server's processes
        # run from cached bytecode.
        env = {**os.environ, "PYTHONPYCACHEPREFIX": bytecode}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for transport in TRANSPORTS.values():
            one_process(server.url, transport, env)  # bytecode written, page cache warm
        for round_ in range(rounds):
            for name, transport in TRANSPORTS.items():
                times[name].append(one_process(server.url, transport, env))
            print(f"round {round_ + 1}: " + ", ".join(f"{times[n][-1][0]:.1f}" for n in times))
    report = render(times, rounds, time.time() - started)
    publish(report, options, DEFAULT_OUTPUT)
    vanilla, delayq = (statistics.median(t[0] for t in times[name]) for name in TRANSPORTS)
    if delayq > vanilla + ALLOWANCE_MS:
        missed = f"the first delayed publish costs {delayq - vanilla:.1f} ms over vanilla's"
        if not options.quick:  # a quick run (CI's smoke run) keeps the code from rotting
            sys.exit(missed)
        print(f"goal missed: {missed}")


def render(times: dict[str, list[tuple[float, float]]], rounds: int, took: float) -> str:
    vanilla_first = statistics.median(t[0] for t in next(iter(times.values())))
    lines = [
        "# The first delayed publish in a fresh process",
        "",
        f"{rounds} alternating rounds, a fresh process per side each round, bytecode cached;"
        f" {server_version()}, Python {sys.version.split()[0]}; {took:.0f} s.",
        "",
        "| | first publish, median (min-max) | over vanilla | second publish, median |",
        "|---|---:|---:|---:|",
    ]
    for name, pairs in times.items():
        firsts = [first for first, _ in pairs]
        first = statistics.median(firsts)
        lines.append(
            f"| {name} | {first:.1f} ms ({min(firsts):.1f}-{max(firsts):.1f})"
            f" | {first - vanilla_first:+.1f} ms"
            f" | {statistics.median(second for _, second in pairs):.2f} ms |"
        )
    lines += ["", f"Goal: at most vanilla's plus {ALLOWANCE_MS:.0f} ms.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
