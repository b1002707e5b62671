"""Scenario 7: draining a large due backlog with 1, 2 and 4 concurrent movers.

celery-delayq only (vanilla has nothing to drain). For each mover count the store
is filled with messages already due (pipelined ``schedule.lua`` from two
processes), then that many processes, each looping ``store.move_all_due()``, start
on one signal and stop when the store is empty. Throughput is messages over the
slowest mover's time. Exactly-once is checked on what arrived: every id in the
queue list is read back, and each of the filled ids must be there exactly once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .. import plots
from ..harness import Run, log
from ..movers import drain
from ..report import MetricSpec, Target
from ..store_tools import delivered_ids, parallel_fill, server_time_ms


class ScaleOut:
    key = "scaleout"
    sides = ("delayq",)

    def __init__(self, messages: int, mover_counts: tuple[int, ...] = (1, 2, 4)) -> None:
        self.messages = messages
        self.mover_counts = mover_counts
        self.rates: dict[int, float] = {}

    @property
    def title(self) -> str:
        return f"7. Scale-out, draining {self.messages:,} due messages"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        none = Target("= 0", lambda v: v == 0)
        rows = []
        for count in self.mover_counts:
            rows += [
                MetricSpec(f"rate_{count}", f"{count} mover(s): messages/s", "", digits=0),
                MetricSpec(f"lost_{count}", f"{count} mover(s): ids missing", "", none, 0),
                MetricSpec(f"dup_{count}", f"{count} mover(s): ids delivered twice+", "", none, 0),
            ]
        return tuple(rows)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        url, client = run.config.broker_url, run.client
        values: dict[str, float | None] = {}
        for count in self.mover_counts:
            queue = f"{run.config.queue}.{count}"
            seconds = parallel_fill(url, queue, self.messages, server_time_ms(client))
            log(f"  filled {self.messages:,} in {seconds:.1f}s; draining with {count} mover(s)")
            reports = drain(url, queue, count)
            slowest = max(report["seconds"] for report in reports)
            arrived = Counter(delivered_ids(client, queue))
            client.delete(queue)
            self.rates[count] = self.messages / slowest
            values[f"rate_{count}"] = self.rates[count]
            values[f"lost_{count}"] = float(
                sum(1 for i in range(self.messages) if i not in arrived)
            )
            values[f"dup_{count}"] = float(sum(1 for n in arrived.values() if n > 1))
            moved = [report["moved"] for report in reports]
            log(f"  {count} mover(s): {self.rates[count]:,.0f}/s, moved per mover {moved}")
        return values

    def plot(self, directory: Path) -> list[Path]:
        counts = sorted(self.rates)
        drawn = plots.lines(
            directory / "scaleout.png",
            {"delayq": ([float(c) for c in counts], [self.rates[c] for c in counts])},
            title=f"Draining {self.messages:,} due messages (one Redis, 2 CPUs)",
            xlabel="concurrent movers",
            ylabel="messages moved per second",
        )
        return [drawn] if drawn else []
