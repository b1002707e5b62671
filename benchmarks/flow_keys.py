"""``python -m benchmarks.flow_keys [--quick] [--output PATH]``: many limit keys, each
with a backlog, beside an unlimited task in the same queue; and what releasing them costs
Redis per move call.

Two parts, on one private redis-server:

- **Live**, with real workers (``celery worker --pool=solo``, each running its mover):
  ``KEYS`` limit keys of a task limited to 1/s (``delayq_rate_limits``), each sent
  ``EACH`` messages (``headers={"delayq_limit_key": "k<i>"}``), beside a steady stream of
  countdown messages of an unlimited task. Against a baseline pass: as many unlimited
  messages as the keys hold, drained by the same workers, beside the same stream. From
  the release log (``P:{Q}:fc:log``): the most releases of one key in any 1-s window, and
  the aggregate release rate; from the tasks: the drain rate, and the stream's lateness
  (start minus ETA) in either pass; from SLOWLOG (calls of 0.5 ms or more): the longest
  move calls (the default, time-sized batches: ``delayq_move_call_budget``); and the CPU
  time Redis and the workers (with their movers) used in either pass.
  ``--redis-own-core`` pins redis-server to one CPU and everything else to the others,
  as a Redis on a host of its own.
- **Cost**, calls made one by one at a fixed batch size (``delayq_move_batch_size``, no
  time sizing), each call's Redis time read from ``INFO commandstats`` (the only client):
  calls that take due gated messages into their buckets (stored through the schedule, as
  one published ahead of its due time is), calls that only release (a full batch, one
  message from each of that many keys), and unlimited moves of the same batch size; and
  the Redis time per publish of a due limited message (it enters its bucket there) and
  of an unlimited one.

Writes benchmarks/RESULTS-flow-keys.md on a full run.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import uuid
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import kombu.pools
import redis

from celery_delayq.config.limits import LIMIT_KEY_HEADER
from celery_delayq.core.handover.same_redis import SameRedisMove
from celery_delayq.core.layout.gates import GateSpec, Rate, bucket_of, gate_field, split_bucket
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import RedisServer, wait_until

from .app import RECORD_KEYED_TASK, RECORD_TASK
from .harness import Run, log
from .processes import redis_cpu_seconds
from .report import server_version
from .runconfig import RunConfig
from .standalone import option_parser, publish
from .store_tools import make_store, move_lateness, payload, server_time_ms, task_id

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-flow-keys.md"
RATE = "1/s"
#: SLOWLOG keeps commands at least this long (us) during the live passes.
SLOW_US = 500
#: A batch this small cannot keep Redis busy 2 ms by its own work (a release costs about
#: 35 µs, RESULTS-flow-keys.md): a call of it over 2 ms waited for a CPU.
SMALL_BATCH = 24


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- live ------------------------------------------------------------------------------


class LivePass:
    """One pass with real workers: a backlog (limited keys, or unlimited), a stream."""

    def __init__(self, url: str, client: redis.Redis, log_dir: Path, limited: bool) -> None:
        self.url, self.client, self.limited = url, client, limited
        queue = f"bench.flowkeys.{'limited' if limited else 'plain'}.{uuid.uuid4().hex[:8]}"
        settings: dict[str, Any] = {}
        if limited:
            settings = {"delayq_rate_limits": {RECORD_KEYED_TASK: RATE}}
            settings["delayq_release_log"] = 1_000_000
        self.config = RunConfig(
            broker_url=url,
            side="delayq",
            queue=queue,
            results_key=f"{queue}:executions",
            ready_key=f"{queue}:ready",
            delayq_settings=settings,
        )
        self.run = Run(self.config, client, log_dir)
        self.keys = KeySpace().for_queue(queue)

    def publish_backlog(self, keys: int, each: int) -> float:
        """``keys * each`` messages, the keys taking turns; seconds taken."""
        began = time.perf_counter()
        with self.run.app.producer_or_acquire() as producer:
            for i in range(keys * each):
                if self.limited:
                    headers = {LIMIT_KEY_HEADER: f"k{i % keys}"}
                    self.run.app.send_task(RECORD_KEYED_TASK, headers=headers, producer=producer)
                else:
                    self.run.app.send_task(RECORD_TASK, producer=producer)
        return time.perf_counter() - began

    def publish_stream(self, count: int, seconds: float) -> None:
        """``count`` unlimited countdown messages due evenly over ``seconds`` from 1 s on."""
        with self.run.app.producer_or_acquire() as producer:
            for i in range(count):
                countdown = 1 + i * seconds / count
                self.run.app.send_task(RECORD_TASK, countdown=countdown, producer=producer)

    def measure(self, workers: int, backlog: int, stream: int, seconds: float) -> dict[str, Any]:
        self.client.config_set("slowlog-log-slower-than", SLOW_US)
        self.client.config_set("slowlog-max-len", 100_000)
        self.client.slowlog_reset()
        self.client.config_resetstat()
        gated_before = int(self.client.hget(self.keys.stats, "gated") or 0)
        redis_cpu = redis_cpu_seconds(self.client)
        self.run.start_workers(workers)
        self.publish_stream(stream, seconds)
        total = backlog + stream
        movers = make_store(self.url).movers
        batches: list[int] = []  # the movers' batch sizes, as their heartbeats say them

        def done() -> bool:
            batches.extend(int(beat.get("batch", 0)) for beat in movers.all())
            return self.run.execution_count() >= total

        wait_until(done, timeout=600, interval=0.2, what=f"{total} executions")
        # where the CPU went: Redis, and the workers with their movers (their start-up
        # included, the same in either pass)
        redis_cpu = redis_cpu_seconds(self.client) - redis_cpu
        workers_cpu = sum(worker.cpu_seconds() for worker in self.run.workers)
        sha = make_store(self.url).state.scripts.move_due.sha.encode()
        # (µs, batch asked for) of each move call in SLOWLOG
        calls = [
            (int(entry["duration"]), move_limit(bytes(entry["command"])))
            for entry in self.client.slowlog_get(100_000)
            if bytes(entry["command"]).startswith(b"EVALSHA " + sha)
        ]
        slow = [us for us, _ in calls]
        gated = int(self.client.hget(self.keys.stats, "gated") or 0) - gated_before
        stats = self.client.info("commandstats").get("cmdstat_evalsha", {})
        # the movers' passes, as their last heartbeats (a second apart at most) counted them
        passes = sum(int(beat.get("passes", 0)) for beat in movers.all())
        entries = [json.loads(raw) for raw in self.client.lrange(self.config.results_key, 0, -1)]
        late = [e["late"] for e in entries if e["late"] is not None]
        starts = sorted(e["at"] for e in entries if e["late"] is None)
        result: dict[str, Any] = {
            "executions": len(entries),
            "drain_rate": (len(starts) - 1) / (starts[-1] - starts[0]),
            "late_mean": statistics.fmean(late),
            "late_p99": quantile(late, 0.99),
            "late_max": max(late),
            "move_calls_slow": len(slow),
            "move_call_max_us": max(slow, default=0),
            "move_calls_over_2ms": sum(us > 2000 for us in slow),
            "move_calls_over_5ms": sum(us > 5000 for us in slow),
            "evalsha_calls": int(stats.get("calls", 0)),
            "evalsha_usec_per_call": float(stats.get("usec_per_call", 0)),
            "mover_passes": passes,
            "mover_batch_median": statistics.median(batches) if batches else None,
            "mover_batches": spread(batches),
            "over_2ms": sorted(((us, limit) for us, limit in calls if us > 2000), reverse=True),
            "entered_by_moves": gated,
            "redis_cpu_s": redis_cpu,
            "workers_cpu_s": workers_cpu,
            "drain_s": starts[-1] - starts[0],
            **move_lateness(self.url, self.config.queue),
        }
        if self.limited:
            result.update(self.releases())
        return result

    def releases(self) -> dict[str, Any]:
        """From the release log: each key's most releases in any 1-s window, and the
        aggregate rate."""
        raw = self.client.lrange(f"{self.keys.gates}log", 0, -1)
        times: dict[str, list[int]] = defaultdict(list)
        calls: dict[str, int] = defaultdict(int)  # a call's releases share its TIME
        for line in raw:
            at, _, bucket = line.decode("utf-8", "surrogateescape").partition(" ")
            times[split_bucket(bucket)[1] or ""].append(int(at))
            calls[at] += 1
        worst = max(most_in_window(sorted(ts), 1_000_000) for ts in times.values())
        every = sorted(t for ts in times.values() for t in ts)
        per_second = defaultdict(int)
        for t in every:
            per_second[(t - every[0]) // 1_000_000] += 1
        return {
            "released": len(every),
            "keys_released": len(times),
            "most_per_key_in_1s": worst,
            "release_rate": (len(every) - 1) / ((every[-1] - every[0]) / 1e6),
            "release_peak_1s": max(per_second.values()),
            "release_calls": len(calls),
            "releases_per_call": spread(list(calls.values())),
        }

    def close(self) -> None:
        self.run.close()


def move_limit(command: bytes) -> int | None:
    """The batch a move call was asked for, from its SLOWLOG entry (``EVALSHA sha
    numkeys keys... args...``): ``ARGV[3]`` of move_due.lua."""
    words = command.split(b" ")
    try:
        return int(words[3 + int(words[2]) + 2])
    except (IndexError, ValueError):
        return None


def spread(values: list[int]) -> tuple[int, int, int, int, int] | None:
    """Least, 10th percentile, median, 90th percentile and most of ``values``."""
    if not values:
        return None
    return (
        min(values),
        int(quantile(values, 0.1)),
        int(quantile(values, 0.5)),
        int(quantile(values, 0.9)),
        max(values),
    )


def most_in_window(times: list[int], width: int) -> int:
    """The most of ``times`` (sorted) in any half-open window ``[t, t + width)``."""
    return max((bisect_left(times, t + width) - i for i, t in enumerate(times)), default=0)


def live(url: str, client: redis.Redis, size: dict[str, int]) -> dict[str, dict[str, Any]]:
    backlog = size["keys"] * size["each"]
    results = {}
    with tempfile.TemporaryDirectory(prefix="flow-keys-") as log_dir:
        for limited in (False, True):
            client.flushall()
            kombu.pools.reset()  # producer pools are per URL: this pass's settings, not the last's
            one = LivePass(url, client, Path(log_dir), limited)
            try:
                took = one.publish_backlog(size["keys"], size["each"])
                log(f"{'limited' if limited else 'unlimited'}: {backlog} published in {took:.1f} s")
                results["limited" if limited else "unlimited"] = one.measure(
                    size["workers"], backlog, size["stream"], size["stream_seconds"]
                )
                log(f"  {results['limited' if limited else 'unlimited']}")
            finally:
                one.close()
    return results


# -- cost -------------------------------------------------------------------------------


class CallMeter:
    """Redis time (µs) and commands (those the script ran) of single script calls, from
    ``INFO commandstats`` read around each (the only client)."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def reading(self) -> tuple[int, int]:
        stats = self.client.info("commandstats")
        usec = int(stats.get("cmdstat_evalsha", {}).get("usec", 0))
        calls = sum(
            int(value["calls"])
            for name, value in stats.items()
            if name not in ("cmdstat_info", "cmdstat_evalsha")
        )
        return usec, calls

    def call(self, store: DelayedStore) -> tuple[int, int, int]:
        """One move call: (µs, commands, messages moved)."""
        usec, calls = self.reading()
        moved = store.move_due("q").moved
        after_usec, after_calls = self.reading()
        return after_usec - usec, after_calls - calls, moved

    def publish(self, store: DelayedStore, messages: list[Scheduled]) -> tuple[float, float]:
        """Publish ``messages`` (pipelined schedule calls): Redis µs and commands per
        message, over all of them."""
        usec, calls = self.reading()
        store.schedule_many(messages)
        after_usec, after_calls = self.reading()
        return (after_usec - usec) / len(messages), (after_calls - calls) / len(messages)


def gated(keys: int, count: int, due: int) -> Iterable[Scheduled]:
    spec = GateSpec((Rate.parse(RATE),)).encode()
    for i in range(count):
        gate = gate_field(spec, bucket_of(RECORD_KEYED_TASK, f"k{i % keys}"))
        yield Scheduled("q", f"m{i}", task_id(i), due, "q", payload(i), gate=gate)


def summary(name: str, calls: list[tuple[int, int, int]]) -> dict[str, float]:
    """Median and max µs, median commands of some calls, and µs per message moved."""
    if not calls:
        return {}
    return {
        f"{name}_calls": len(calls),
        f"{name}_median_us": statistics.median(c[0] for c in calls),
        f"{name}_max_us": max(c[0] for c in calls),
        f"{name}_median_commands": statistics.median(c[1] for c in calls),
        f"{name}_us_per_message": sum(c[0] for c in calls) / max(1, sum(c[2] for c in calls)),
    }


#: How far ahead (ms) the entering part's messages are stored: longer than storing them
#: takes, so that none is due (and enters its bucket) at its publish.
ENTER_AHEAD_MS = 10_000


def hold_all(client: redis.Redis, shard: Any, buckets: list[str]) -> None:
    """Hold every bucket (its state's "hold"), so that messages only enter them."""
    with client.pipeline(transaction=False) as pipe:
        for bucket in buckets:
            pipe.hset(shard.gate("s", bucket), "hold", "paused")
        pipe.execute()


def cost(client: redis.Redis, keys: int, each: int, batch: int, seconds: float) -> dict[str, Any]:
    """Move calls of ``batch``, gated (taking due messages into their buckets; releasing
    as many as a call of that batch does) and unlimited."""
    client.flushall()
    meter = CallMeter(client)
    store = DelayedStore(
        client, KeySpace(), batch, handover=lambda: SameRedisMove(client, release_log=10_000)
    )
    shard = store.keys.for_queue("q")
    buckets = [bucket_of(RECORD_KEYED_TASK, f"k{i}") for i in range(keys)]
    due = server_time_ms(client) - 1000
    # warm: each script loaded before the measures (a first call runs EVAL, not EVALSHA)
    store.schedule_many([*gated(1, 1, due), Scheduled("w", "w", task_id(10**8), due, "w", b"w")])
    # entering at publish: due gated messages go straight into their (held) buckets
    publish_entering = meter.publish(store, list(gated(keys, keys * each, due)))
    client.flushall()
    # Every bucket held while its messages enter, so that entering calls only enter; then
    # all let go at once, as a resume would: full release calls.
    hold_all(client, shard, buckets)
    # entering by a move: through the schedule, as a gated message published ahead of
    # its due time is (a due one would enter at its publish): stored due a little later,
    # and moved once due
    later = server_time_ms(client) + ENTER_AHEAD_MS
    messages = list(gated(keys, keys * each, later))
    for start in range(0, len(messages), 1_000):
        store.schedule_chunk(messages[start : start + 1_000])
    if server_time_ms(client) >= later:
        raise RuntimeError("storing the entering part took longer than ENTER_AHEAD_MS")
    time.sleep((later - server_time_ms(client)) / 1000 + 0.01)
    entering, releasing = [], []
    while client.exists(shard.pages):
        entering.append(meter.call(store))
    with client.pipeline(transaction=False) as pipe:
        for bucket in buckets:
            pipe.hdel(shard.gate("s", bucket), "hold")
            pipe.zadd(f"{shard.gates}ready", {bucket: 0})
        pipe.execute()
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        listed = client.llen("q")
        call = meter.call(store)
        if client.llen("q") > listed:
            releasing.append(call)
    # full release calls: a call's batch allows batch / the release weight (lua/gates.lua)
    most = max((c[2] for c in releasing), default=0)
    releasing = [c for c in releasing if c[2] == most]
    client.delete("q")
    publish_plain = meter.publish(
        store,
        [
            Scheduled("q", f"u{i}", task_id(10**7 + i), due, "q", payload(i))
            for i in range(keys * each)
        ],
    )
    plain = []
    while client.exists(shard.pages):
        plain.append(meter.call(store))
    store.close()
    full = [c for c in plain if c[2] == batch]
    return {
        "batch": batch,
        **summary("entering", [c for c in entering if c[2] == batch]),
        **summary("release", releasing),
        **summary("plain", full),
        "publish_entering_us": publish_entering[0],
        "publish_entering_commands": publish_entering[1],
        "publish_plain_us": publish_plain[0],
        "publish_plain_commands": publish_plain[1],
    }


# -- report -----------------------------------------------------------------------------

FULL = {"keys": 10_000, "each": 5, "workers": 2, "stream": 600, "stream_seconds": 30}
QUICK = {"keys": 1_000, "each": 2, "workers": 1, "stream": 100, "stream_seconds": 5}


def main() -> None:
    parser = option_parser(__doc__)
    parser.add_argument("--skip-live", action="store_true", help="the cost part only")
    parser.add_argument(
        "--redis-shares-cpu",
        action="store_true",
        help="run redis-server at the priority of the rest, not ahead of it",
    )
    parser.add_argument(
        "--redis-own-core",
        action="store_true",
        help="pin redis-server to the first CPU and everything else to the others",
    )
    options = parser.parse_args()
    size = QUICK if options.quick else FULL
    started = time.time()
    with RedisServer() as server:
        redis_cpu = "shared" if options.redis_shares_cpu else redis_first(server)
        if options.redis_own_core:
            redis_cpu += "; " + redis_own_core(server)
        log(f"redis-server's CPU: {redis_cpu}")
        client = server.client()
        costs = [
            cost(client, size["keys"], size["each"], batch, 3 if options.quick else 8)
            for batch in (500, 100)
        ]
        for one in costs:
            log(f"cost: {one}")
        runs = {} if options.skip_live else live(server.url, client, size)
    report = render(size, costs, runs, time.time() - started, redis_cpu)
    publish(report, options, DEFAULT_OUTPUT)


def redis_first(server: RedisServer) -> str:
    """Put redis-server 19 nice levels ahead of this process, as a Redis with CPUs of its
    own (as in production) would be: on the 2 cores it shares with the workers and their
    movers, a script call's SLOWLOG time otherwise includes its waits for a CPU (a batch
    of 10 measured over 7 ms). Lowering a niceness needs root (CAP_SYS_NICE): without it,
    it stays shared. Returns what the report says of it."""
    assert server.process is not None
    own = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, server.process.pid, max(-20, own - 19))
    except PermissionError:
        return "shared (no permission to raise its priority)"
    return f"nice {os.getpriority(os.PRIO_PROCESS, server.process.pid)}, the rest {own}"


def redis_own_core(server: RedisServer) -> str:
    """Pin redis-server to the first CPU, and this process (and so the workers it starts
    later) to the others: Redis then never waits for a CPU the workers hold, nor takes
    one from them, as on a host of its own. Returns what the report says of it."""
    assert server.process is not None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    os.sched_setaffinity(server.process.pid, {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))
    return f"pinned to CPU {cpus[0]}, the rest to CPU {', '.join(map(str, cpus[1:]))}"


def render(
    size: dict[str, int],
    costs: list[dict[str, Any]],
    runs: dict[str, dict[str, Any]],
    took: float,
    redis_cpu: str,
) -> str:
    lines = [
        "# Flow control: many limit keys beside an unlimited task",
        "",
        f"Generated by `python -m benchmarks.flow_keys` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s), one private "
        f"redis-server ({server_version()}) on the same 2 cores as everything else; its "
        f"CPU priority: {redis_cpu}.",
        "",
        "## Redis time per move call (one caller, fixed batch size)",
        "",
        f"{size['keys']:,} keys at {RATE}, {size['each']} messages each, all due, moved by "
        "calls made back to back, each call's Redis µs and the commands its script ran read "
        "from `INFO commandstats` around it. *Entering*: calls taking a full batch of due gated "
        "messages into their buckets (the buckets held meanwhile); *releasing*: then, the "
        "buckets let go at once, calls that released as many as a call of that batch may "
        "(a third of the batch: a release weighs three moves; one message of each of "
        "that many keys); *unlimited*: the same count of unlimited messages, full batches.",
        "",
        "| batch | calls | µs median | µs max | commands median | µs per message moved "
        "| µs median vs unlimited |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for one in costs:
        for kind, name in (
            ("entering", "entering"),
            ("release", "releasing"),
            ("plain", "unlimited"),
        ):
            if f"{kind}_calls" not in one:
                lines.append(f"| {one['batch']}, {name} | 0 | | | | | |")
                continue
            ratio = one[f"{kind}_median_us"] / one["plain_median_us"]
            lines.append(
                f"| {one['batch']}, {name} | {one[f'{kind}_calls']:,} | "
                f"{one[f'{kind}_median_us']:,.0f} | {one[f'{kind}_max_us']:,} | "
                f"{one[f'{kind}_median_commands']:,.0f} | {one[f'{kind}_us_per_message']:.1f} | "
                f"{ratio:.2f}x |"
            )
    lines += [
        "",
        "## Redis time per publish",
        "",
        "The same messages published (pipelined schedule calls), all due: a limited one goes "
        "straight into its bucket, an unlimited one into the schedule. Redis µs and "
        "commands per message, over all of them, from `INFO commandstats`.",
        "",
        "| batch of the run | limited, due: µs | commands | unlimited: µs | commands "
        "| µs limited vs unlimited |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for one in costs:
        lines.append(
            f"| {one['batch']} | {one['publish_entering_us']:.1f} | "
            f"{one['publish_entering_commands']:.1f} | {one['publish_plain_us']:.1f} | "
            f"{one['publish_plain_commands']:.1f} | "
            f"{one['publish_entering_us'] / one['publish_plain_us']:.2f}x |"
        )
    if runs:
        plain, limited = runs["unlimited"], runs["limited"]
        lines += [
            "",
            f"## Live: {size['keys']:,} keys x {size['each']} messages, {size['workers']} "
            f"solo workers (each with its mover), a stream of {size['stream']} unlimited "
            f"countdown messages due over {size['stream_seconds']} s",
            "",
            "| measure | unlimited backlog (baseline) | limited keys | ratio |",
            "|---|---:|---:|---:|",
            f"| executions | {plain['executions']:,} | {limited['executions']:,} | |",
            row("drain rate (backlog tasks started /s)", plain, limited, "drain_rate", "{:,.0f}"),
            f"| releases /s, aggregate (release log) | | {limited['release_rate']:,.0f} | "
            f"{limited['release_rate'] / plain['drain_rate']:.2f}x of the unlimited drain |",
            f"| releases in the busiest second | | {limited['release_peak_1s']:,} | |",
            f"| most releases of one key in any 1 s (limit 1) | | "
            f"{limited['most_per_key_in_1s']} | |",
            f"| keys released / releases logged | | {limited['keys_released']:,} / "
            f"{limited['released']:,} | |",
            row("stream lateness, mean (s)", plain, limited, "late_mean", "{:.3f}"),
            row("stream lateness, p99 (s)", plain, limited, "late_p99", "{:.3f}"),
            row("stream lateness, max (s)", plain, limited, "late_max", "{:.3f}"),
            row("stream move lateness, mean (ms)", plain, limited, "move_mean", "{:.1f}"),
            row("move calls of 0.5 ms or more", plain, limited, "move_calls_slow", "{:,}"),
            row("... over 2 ms", plain, limited, "move_calls_over_2ms", "{:,}"),
            row("... over 5 ms", plain, limited, "move_calls_over_5ms", "{:,}"),
            row("longest move call (µs)", plain, limited, "move_call_max_us", "{:,}"),
            row("EVALSHA calls", plain, limited, "evalsha_calls", "{:,}"),
            row("EVALSHA µs per call", plain, limited, "evalsha_usec_per_call", "{:.1f}"),
            row("mover passes (heartbeats)", plain, limited, "mover_passes", "{:,}"),
            row(
                "move batch size, median of samples (heartbeats)",
                plain,
                limited,
                "mover_batch_median",
                "{:,.0f}",
            ),
            f"| move batch size, least / p10 / median / p90 / most of samples | "
            f"{spread_text(plain['mover_batches'])} | {spread_text(limited['mover_batches'])} | |",
            f"| calls that released (release log), releases a call: least / p10 / median / "
            f"p90 / most | | {limited['release_calls']:,}: "
            f"{spread_text(limited['releases_per_call'])} | |",
            row("gated messages entered by move calls", plain, limited, "entered_by_moves", "{:,}"),
            row("drain, first to last backlog start (s)", plain, limited, "drain_s", "{:.1f}"),
            row("Redis CPU (s)", plain, limited, "redis_cpu_s", "{:.1f}"),
            row("workers' CPU, tasks and movers (s)", plain, limited, "workers_cpu_s", "{:.1f}"),
            "",
            "Move calls over 2 ms and over 5 ms (SLOWLOG, Redis's own time) by the batch they "
            "were asked for (`ARGV[3]` of move_due.lua, in the entry's arguments): a few tens "
            f"of messages (at most {SMALL_BATCH}) do not take 2 ms of Redis's work on their "
            "own, so such a call's time is mostly Redis waiting for a CPU; a big batch's may be "
            "its work. SLOWLOG keeps no reply, so a call's releases are not known: a call of "
            "batch n releases at most n / 3, and the gated messages entered by move calls are "
            "counted above.",
            "",
            "| pass | calls | batch asked: least / p10 / median / p90 / most "
            f"| of a batch of at most {SMALL_BATCH} | longest: µs at batch |",
            "|---|---:|---|---:|---|",
        ]
        for name, one in (("unlimited backlog", plain), ("limited keys", limited)):
            for over_us in (2000, 5000):
                lines.append(slow_calls_row(f"{name}, over {over_us // 1000} ms", one, over_us))
    lines.append("")
    return "\n".join(lines)


def slow_calls_row(name: str, one: dict[str, Any], over_us: int) -> str:
    """The move calls of a pass over ``over_us``: how many, the batches they were asked
    for, and the 5 longest."""
    calls = [(us, limit) for us, limit in one["over_2ms"] if us > over_us]
    limits = [limit for _, limit in calls if limit is not None]
    small = sum(limit <= SMALL_BATCH for limit in limits)
    longest = ", ".join(f"{us:,} at {limit}" for us, limit in calls[:5])
    return (
        f"| {name} | {len(calls):,} | {spread_text(spread(limits))} | {small:,} "
        f"| {longest or '-'} |"
    )


def spread_text(values: tuple[int, ...] | None) -> str:
    return "-" if values is None else " / ".join(f"{v:,}" for v in values)


def row(name: str, plain: dict[str, Any], limited: dict[str, Any], field: str, form: str) -> str:
    a, b = plain.get(field), limited.get(field)
    ratio = f"{b / a:.2f}x" if a and b is not None else ""
    shown = [form.format(v) if v is not None else "-" for v in (a, b)]
    return f"| {name} | {shown[0]} | {shown[1]} | {ratio} |"


if __name__ == "__main__":
    main()
