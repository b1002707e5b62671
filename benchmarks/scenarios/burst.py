"""Scenarios 3c and 4: a burst of messages due in the same millisecond, one mover.

celery-delayq only; vanilla has no counterpart (its workers already hold every
message, so nothing is moved; executing them is bounded by worker throughput on
both sides). The store is filled with pipelined ``schedule.lua`` calls, all due at
one instant a little ahead; one ``celery_delayq.core.moving.mover.Mover`` in its own process
sleeps until then, as in a worker. Measured: the time from the due instant until
every message is in its queue list (LLEN polled every millisecond), the move rate,
the store's move-lateness histogram, and the longest single script call Redis ran
during the burst (SLOWLOG), at each batch size (``delayq_move_batch_size``), after one
unmeasured warm-up burst. Batches are sized by time within the default
``delayq_move_call_budget`` (the batch size is their upper bound), as in a worker; one
more burst at the default size with sizing off (fixed batches, the behaviour before the
budget) shows what the budget costs in rate and saves in call length, in the same run.

SLOWLOG threshold: with ``slowlog-log-slower-than 0`` Redis 7 also logs every
command a script runs (five per moved message), so the log overflows; a 1 ms
threshold keeps every call that could be the longest and nothing else.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from celery_delayq.config.settings import DelayqConfig

from .. import plots
from ..harness import Run, log
from ..movers import start_mover, stop
from ..report import MetricSpec, Target
from ..store_tools import make_store, parallel_fill, server_time_ms
from .stream import move_lateness

DEFAULT_BATCH = 500
TARGET_RATE = 200_000
TARGET_CALL_MS = 5.0
#: ``delayq_move_call_budget``'s default (seconds): the longest call should stay within it.
CALL_BUDGET = DelayqConfig.move_call_budget
SLOWLOG_THRESHOLD_US = 1_000
#: Seconds between filling the store and the due instant, so the mover is asleep.
LEAD_SECONDS = 2.0
#: Filling is estimated from a probe fill of 5%; this margin covers a busier machine.
FILL_MARGIN = 1.5


def evalsha_calls(client: Any) -> int:
    """EVALSHA calls the server has run so far (INFO commandstats)."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


class Burst:
    key = "burst"
    sides = ("delayq",)

    def __init__(self, messages: int, batch_sizes: tuple[int, ...]) -> None:
        self.messages = messages
        self.batch_sizes = batch_sizes
        self.longest: dict[int, float] = {}

    @property
    def title(self) -> str:
        return f"3c/4. Burst, {self.messages:,} messages due in the same ms, one mover"

    @property
    def specs(self) -> tuple[MetricSpec, ...]:
        rate = Target(f">= {TARGET_RATE:,}/s", lambda v: v >= TARGET_RATE)
        call = Target(f"<= {TARGET_CALL_MS:g} ms", lambda v: v <= TARGET_CALL_MS)
        budget_ms = CALL_BUDGET * 1000
        within = Target(f"<= {budget_ms:g} ms (budget)", lambda v: v <= budget_ms)
        rows = [
            MetricSpec("all_moved", "due instant -> every message in its list", "ms"),
            MetricSpec("rate", "move rate, one mover (messages/s)", "", rate, digits=0),
            MetricSpec("move_p99", "move lateness p99 (histogram bucket bound)", "ms"),
            MetricSpec("move_mean", "move lateness mean (histogram)", "ms"),
            MetricSpec(
                "longest", f"longest script call, batch {DEFAULT_BATCH} (sized)", "ms", within, 2
            ),
            MetricSpec("calls", f"script calls over {SLOWLOG_THRESHOLD_US} us", "", digits=0),
            MetricSpec("over_budget", f"script calls over {budget_ms:g} ms (budget)", "%", None, 2),
            MetricSpec(
                "longest_fixed", f"longest script call, fixed batch {DEFAULT_BATCH}", "ms", call, 2
            ),
            MetricSpec(
                "rate_fixed", f"move rate, fixed batch {DEFAULT_BATCH} (messages/s)", "", digits=0
            ),
            MetricSpec(
                "over_budget_fixed",
                f"script calls over {budget_ms:g} ms, fixed batch {DEFAULT_BATCH}",
                "%",
                None,
                2,
            ),
        ]
        for size in self.batch_sizes:
            if size != DEFAULT_BATCH:
                rows.append(
                    MetricSpec(
                        f"longest_{size}",
                        f"longest script call, batch {size} (sized)",
                        "ms",
                        within,
                        2,
                    )
                )
                rows.append(
                    MetricSpec(
                        f"rate_{size}", f"move rate, batch {size} (messages/s)", "", digits=0
                    )
                )
        return tuple(rows)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {}

    def measure(self, run: Run) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        # One unmeasured burst first: Redis's first touch of the burst's memory (page
        # faults as jemalloc grows) would otherwise be charged to whichever size ran first.
        log(f"  warm-up: {self._burst(run, DEFAULT_BATCH)}")
        fixed = self._burst(run, DEFAULT_BATCH, call_budget=0.0)
        log(f"  fixed batch {DEFAULT_BATCH}: {fixed}")
        values["longest_fixed"], values["rate_fixed"] = fixed["longest"], fixed["rate"]
        values["over_budget_fixed"] = fixed["over_budget"]
        for size in self.batch_sizes:
            result = self._burst(run, size)
            log(f"  batch {size}: {result}")
            self.longest[size] = result["longest"] or 0.0
            if size == DEFAULT_BATCH:
                values.update(result)
            else:
                values[f"longest_{size}"] = result["longest"]
                values[f"rate_{size}"] = result["rate"]
        return values

    def _burst(
        self, run: Run, batch_size: int, call_budget: float = CALL_BUDGET
    ) -> dict[str, float | None]:
        client, url = run.client, run.config.broker_url
        queue = f"{run.config.queue}.{batch_size}.{call_budget:g}"
        mover = start_mover(url, batch_size, call_budget)
        try:
            estimate = self._fill_seconds(url, f"{queue}.probe") * FILL_MARGIN
            due_ms = server_time_ms(client) + int((estimate + LEAD_SECONDS) * 1000)
            fill_seconds = parallel_fill(url, queue, self.messages, due_ms)
            if server_time_ms(client) > due_ms - 200:
                raise RuntimeError(f"filling took {fill_seconds:.1f}s: the burst began early")
            client.config_set("slowlog-log-slower-than", SLOWLOG_THRESHOLD_US)
            client.config_set("slowlog-max-len", 10_000)
            client.slowlog_reset()
            calls_before = evalsha_calls(client)
            first, last = self._watch(run, queue, due_ms)
            slow = client.slowlog_get(10_000)
            calls = evalsha_calls(client) - calls_before
            client.config_set("slowlog-log-slower-than", 10_000)
        finally:
            stop(mover)
        scripts = [e["duration"] / 1000 for e in slow if e["command"][:7].upper() == b"EVALSHA"]
        due = due_ms / 1000
        result: dict[str, float | None] = {
            "all_moved": (last - due) * 1000,
            "rate": self.messages / max(last - first, 1e-3),
            "longest": max(scripts, default=None),
            "calls": float(len(scripts)),
            # the share of all script calls (the mover's move_due.lua, one per batch)
            # that ran longer than the budget, by SLOWLOG and INFO commandstats
            "over_budget": 100 * sum(s > CALL_BUDGET * 1000 for s in scripts) / max(calls, 1),
        }
        result.update(move_lateness(url, queue))
        client.delete(queue)
        return result

    def _fill_seconds(self, url: str, probe_queue: str) -> float:
        """How long filling will take on this machine now, from a small probe fill."""
        probe = max(1, self.messages // 20)
        seconds = parallel_fill(url, probe_queue, probe, 2**41)
        make_store(url).purge(probe_queue)
        return seconds * self.messages / probe

    def _watch(self, run: Run, queue: str, due_ms: int) -> tuple[float, float]:
        """Epoch seconds (Redis clock) of the first and the last delivery, by polling LLEN."""
        client = run.client
        first: float | None = None
        deadline = time.monotonic() + 60 + (due_ms - server_time_ms(client)) / 1000
        while True:
            with client.pipeline(transaction=False) as pipe:
                pipe.llen(queue)
                pipe.time()
                length, (seconds, micros) = pipe.execute()
            now = int(seconds) + int(micros) / 1e6
            if first is None and length > 0:
                first = now
            if length >= self.messages:
                return first or now, now
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {length} of {self.messages} moved")
            time.sleep(0.001)

    def plot(self, directory: Path) -> list[Path]:
        sizes = sorted(self.longest)
        drawn = plots.lines(
            directory / "burst_longest_call.png",
            {"delayq": ([float(s) for s in sizes], [self.longest[s] for s in sizes])},
            title=f"Longest move_due.lua call during a burst of {self.messages:,}",
            xlabel="delayq_move_batch_size",
            ylabel="longest script call (ms)",
            hline=(TARGET_CALL_MS, "target (10 ms)"),
        )
        return [drawn] if drawn else []
