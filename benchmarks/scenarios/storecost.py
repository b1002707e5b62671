"""Scenario 6: Redis memory per pending task, against the message size.

celery-delayq: messages scheduled with ``schedule.lua`` (uuid task ids, due times over
an hour, as real countdown tasks); vanilla: the same payloads LPUSHed to the kombu
queue list, which is what the message costs Redis when it simply waits in its queue.
Read as ``used_memory`` growth (jemalloc's allocated bytes, size-class rounding
included) divided by the number of messages.

Overhead is growth minus payload bytes. Near 10 KB jemalloc's size classes are 2 KB
apart, so the payload's own allocation is rounded up by ~200-300 B in *any* layout,
kombu's list included; the target (< 150 B) therefore applies to what the store adds:
its cost per task over the same message waiting in a kombu list. Both overheads are
reported.
"""

from __future__ import annotations

from typing import Any

from ..harness import Run, log
from ..report import MetricSpec, Target
from ..store_tools import fill, make_store, payload, server_time_ms

TARGET_OVERHEAD = 150.0
SPREAD_MS = 3_600_000

#: Messages per pipelined LPUSH round trip when filling the vanilla list.
PUSH_CHUNK = 2_000


class StoreCost:
    key = "storecost"

    def __init__(self, sizes: tuple[tuple[int, int], ...]) -> None:
        self.sizes = sizes  # (payload bytes, messages)
        self.list_cost: dict[int, float] = {}

    @property
    def title(self) -> str:
        cases = ", ".join(f"{count:,} x {size:,} B" for size, count in self.sizes)
        return f"6. Store cost, Redis memory per pending task ({cases})"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        target = Target(f"< {TARGET_OVERHEAD:g} B", lambda v: v < TARGET_OVERHEAD)
        specs = []
        for size, _ in self.sizes:
            specs += [
                MetricSpec(f"bytes_{size}", f"{size:,} B payload: bytes per pending task", "B"),
                MetricSpec(
                    f"overhead_{size}", f"{size:,} B payload: overhead over the payload bytes", "B"
                ),
                MetricSpec(
                    f"over_list_{size}",
                    f"{size:,} B payload: what the store adds (overhead over the same message "
                    "in a kombu list)",
                    "B",
                    target,
                ),
            ]
        return tuple(specs)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for size, count in self.sizes:
            run.client.flushall()
            before = run.redis_used_memory()
            if run.config.delayq:
                store = make_store(run.config.broker_url)
                due = server_time_ms(run.client) + 60_000
                fill(store, run.config.queue, count, due, size=size, spread_ms=SPREAD_MS)
            else:
                self._push(run, size, count)
            per_task = (run.redis_used_memory() - before) / count
            log(f"  {count:,} x {size:,} B: {per_task:,.1f} B per message")
            if not run.config.delayq:
                self.list_cost[size] = per_task
            values[f"bytes_{size}"] = per_task
            values[f"overhead_{size}"] = per_task - size
            in_list = self.list_cost.get(size)
            values[f"over_list_{size}"] = None if in_list is None else per_task - in_list
        run.client.flushall()
        return values

    @staticmethod
    def _push(run: Run, size: int, count: int) -> None:
        for low in range(0, count, PUSH_CHUNK):
            with run.client.pipeline(transaction=False) as pipe:
                for i in range(low, min(low + PUSH_CHUNK, count)):
                    pipe.lpush(run.config.queue, payload(i, size))
                pipe.execute()
