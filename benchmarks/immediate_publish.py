"""``python -m benchmarks.immediate_publish [--count N] [--rounds R]``: what an immediate
(not delayed) publish costs on the Redis broker with ``delayq_reliable_consume``, against
vanilla kombu's Redis transport, as a ratio.

One private redis-server; per round, each side publishes ``count`` messages with
``send_task`` (no countdown) in turn, the sides alternating which goes first; the
queue is emptied between sides. Reported: per-publish wall and CPU time, medians of the
rounds, and the ratio. Also the cost of one extra ``kombu.utils.json.dumps`` of the same
envelope (what ``Diverter.check_immediate`` used to pay to measure the size).
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

from celery import Celery
from kombu.utils.json import dumps

from celery_delayq.testing.redis_server import RedisServer

DELAYQ_TRANSPORT = "celery_delayq.transport:Transport"


def _app(url: str, transport: str | None) -> Celery:
    app = Celery("immediate", broker=url, set_as_current=False)
    if transport:
        app.conf.broker_transport = transport
    return app


def _publish(app: Celery, count: int) -> tuple[float, float]:
    """Per-publish wall and CPU microseconds of ``count`` immediate publishes."""
    with app.producer_or_acquire() as producer:
        app.send_task("immediate.task", args=(1,), producer=producer)  # connected, scripts
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            app.send_task("immediate.task", args=(i,), producer=producer)
        return (
            (time.perf_counter() - wall) / count * 1e6,
            (time.process_time() - cpu) / count * 1e6,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    server = RedisServer().start()
    try:
        sides = {
            "vanilla kombu": _app(server.url, None),
            "celery-delayq": _app(server.url, DELAYQ_TRANSPORT),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
        for round_ in range(options.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for name in order:
                server.client().flushall()
                results[name].append(_publish(sides[name], options.count))
        print(f"{options.count:,} immediate publishes a side, {options.rounds} rounds alternating")
        print("| side | wall us/publish (median) | CPU us/publish (median) | rounds (wall) |")
        print("|---|---:|---:|---|")
        for name, rows in results.items():
            walls = [wall for wall, _ in rows]
            cpus = [cpu for _, cpu in rows]
            print(
                f"| {name} | {statistics.median(walls):.1f} | {statistics.median(cpus):.1f} "
                f"| {', '.join(f'{w:.1f}' for w in walls)} |"
            )
        vanilla, delayq = results["vanilla kombu"], results["celery-delayq"]
        wall_ratio = statistics.median(w for w, _ in delayq) / statistics.median(
            w for w, _ in vanilla
        )
        cpu_ratio = statistics.median(c for _, c in delayq) / statistics.median(
            c for _, c in vanilla
        )
        print(f"ratio celery-delayq / vanilla: wall {wall_ratio:.3f}x, CPU {cpu_ratio:.3f}x")
        message = {
            "body": "W1sxXSwge30sIHsiY2FsbGJhY2tzIjogbnVsbCwgImVycmJhY2tzIjogbnVsbH1d",
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"lang": "py", "task": "immediate.task", "id": "x" * 36, "retries": 0},
            "properties": {"delivery_tag": "y" * 36, "priority": 0, "body_encoding": "base64"},
        }
        extra = min(timeit.repeat(lambda: dumps(message), number=10_000, repeat=3)) / 10_000
        print(f"one extra dumps of such an envelope: {extra * 1e6:.1f} us")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
