"""``python -m benchmarks.flow_rate [--quick] [--messages N] [--output PATH]``: how well a
rate limit holds across several workers, celery-delayq's flow control (``delayq_rate_limits``)
beside Celery's own ``rate_limit``, one side after the other.

Each side has a private redis-server and the same prefork workers (``-c 2`` each), and
sends the same messages at once, plain ``.delay()`` of one task limited to 10 a second:

- ``delayq``: the limit in ``delayq_rate_limits``, held at release by the store; no worker
  moves (``delayq_worker_mover = False``): two standalone movers (``celery delayq mover``)
  do, one of them SIGKILLed and started again every 2 s, in turn.
- ``celery``: kombu's own Redis transport, the task's ``rate_limit="10/s"``, which each
  worker holds on its own.

Read: the store's release log (``P:{Q}:fc:log``, each release's Redis time) and each run's
start, as the task recorded it. The most releases and the most starts in any half-open
1-second window ``[t, t + 1 s)``; the rate from the first to the last (the backlog lasts
the whole run); lost (sent, never ran) and doubled (ran twice) task ids.

Exit status 1 when celery-delayq misses its goal: no window with more releases than the
limit, none with more starts than the limit + 1 (a worker may start a task a moment after
another that was released earlier), nothing lost or doubled, every side quiescent at the
end; and, on a full run, a release rate of at least 0.95 x the limit (the rule's is 0.97 x).
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.testing import (
    MOVER,
    WORKER,
    LedgerWriter,
    RedisServer,
    Slot,
    celery_command,
    exit_on_termination,
    wait_until,
    wait_until_quiescent,
)

from . import plots
from .flow_rate_app import ENV, QUEUE, READY_KEY, STARTS_KEY, TASK, make_app
from .harness import log
from .processes import REPO_ROOT
from .report import environment, goal_line
from .scenarios.lateness import percentile
from .standalone import option_parser, publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-flow-rate.md"
APP_MODULE = "benchmarks.flow_rate_app"
#: Seconds between two mover kills (the movers killed in turn).
KILL_EVERY = 2.0
#: The least release rate of the goal, as a share of the limit (the rule's is 0.97).
LEAST_RATE = 0.95
#: The window the limit is counted in (seconds).
WINDOW = 1.0
#: A side's wait ends when no task started for this long (seconds): the rest would not.
STALL = 30.0
#: The longest a side's wait lasts (seconds): vanilla Celery's 3,000 take ~13 minutes.
MOST_SECONDS = 3600.0


@dataclass(frozen=True)
class Shape:
    """How big a run is: the limit (per second), messages, workers and their processes."""

    rate: int
    messages: int
    workers: int
    concurrency: int
    movers: int


FULL = Shape(rate=10, messages=3000, workers=4, concurrency=2, movers=2)
QUICK = Shape(rate=10, messages=100, workers=2, concurrency=2, movers=2)
SIDES = ("delayq", "celery")
LABELS = {
    "delayq": "celery-delayq (`delayq_rate_limits`)",
    "celery": 'vanilla Celery (`rate_limit="10/s"`)',
}


@dataclass
class Observed:
    """What one side's run left: send time, runs' starts, releases, kills."""

    side: str
    sent_at: float
    sent: list[str]
    #: (epoch s, task id) of every run, in the order they were recorded.
    starts: list[tuple[float, str]]
    #: epoch s of every release the store logged (celery-delayq only).
    releases: list[float]
    kills: int
    #: (up, down) of every mover's life: from its first heartbeat seen to its kill or stop.
    mover_lives: list[tuple[float, float]] = field(default_factory=list)
    #: Why the side did not settle (something left that could still run), or None.
    unsettled: str | None = None
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start and end

    @property
    def start_times(self) -> list[float]:
        return sorted(at for at, _ in self.starts)


def most_in_window(times: Sequence[float], width: float = WINDOW) -> list[int]:
    """For each of the sorted ``times``, how many fall in ``[t, t + width)``: the most of
    these is the most in any half-open window of that width (a window can always be
    moved right to start at its first time without losing any)."""
    counts, end = [], 0
    for start, at in enumerate(times):
        end = max(end, start)
        while end < len(times) and times[end] < at + width:
            end += 1
        counts.append(end - start)
    return counts


def per_rate(times: Sequence[float], idle: float = 0.0) -> float | None:
    """The rate (per second) from the first of the sorted ``times`` to the last, less
    ``idle`` seconds of that span."""
    if len(times) < 2 or times[-1] - times[0] <= idle:
        return None
    return (len(times) - 1) / (times[-1] - times[0] - idle)


def pickup(starts: Sequence[float], releases: Sequence[float]) -> tuple[float, float, float] | None:
    """How long after its release each task started (ms; p50, p99, max), the k-th start
    against the k-th release of the sorted times: a bucket releases in send order, and
    a start that overtakes another shows as both a little off."""
    if not releases or len(starts) != len(releases):
        return None
    after = sorted((start - release) * 1000 for start, release in zip(starts, releases))
    return percentile(after, 50), percentile(after, 99), after[-1]


def uncovered(lives: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` in none of the ``(up, down)`` spans of ``lives``."""
    gaps, reached = 0.0, start
    for up, down in sorted(lives):
        if up > reached:
            gaps += max(0.0, min(up, end) - reached)
        reached = max(reached, down)
        if reached >= end:
            return gaps
    return gaps + max(0.0, end - reached)


@dataclass(frozen=True)
class Figures:
    """One side's measurements."""

    sent: int
    ran: int
    lost: int
    doubles: int
    most_starts: int
    start_windows_over: int  # windows (one per start) with more than the limit + 1
    start_rate: float | None
    took: float  # from the send to the last start
    releases: int
    most_releases: int | None
    release_windows_over: int  # windows (one per release) with more than the limit
    release_rate: float | None
    kills: int
    #: Seconds from the first release to the last with no mover up (None: no movers).
    no_mover: float | None
    release_rate_with_mover: float | None
    #: The k-th start less the k-th release (ms): p50, p99, max; None without releases.
    pickup: tuple[float, float, float] | None

    @classmethod
    def of(cls, observed: Observed, rate: int) -> Figures:
        starts = observed.start_times
        ids = Counter(task_id for _, task_id in observed.starts)
        in_start_windows = most_in_window(starts)
        releases = sorted(observed.releases)
        in_release_windows = most_in_window(releases)
        no_mover = None
        if observed.mover_lives and releases:
            no_mover = uncovered(observed.mover_lives, releases[0], releases[-1])
        return cls(
            sent=len(observed.sent),
            ran=len(ids),
            lost=len(set(observed.sent) - set(ids)),
            doubles=sum(n - 1 for n in ids.values()),
            most_starts=max(in_start_windows, default=0),
            start_windows_over=sum(n > rate + 1 for n in in_start_windows),
            start_rate=per_rate(starts),
            took=(starts[-1] - observed.sent_at) if starts else 0.0,
            releases=len(releases),
            most_releases=max(in_release_windows) if releases else None,
            release_windows_over=sum(n > rate for n in in_release_windows),
            release_rate=per_rate(releases),
            kills=observed.kills,
            no_mover=no_mover,
            release_rate_with_mover=None if no_mover is None else per_rate(releases, no_mover),
            pickup=pickup(starts, releases),
        )


class SideRun:
    """One side's workers and movers (``Slot``s, each SIGKILLed and started again at will)
    on a private redis-server; their logs and the ledger of their lives in ``directory``."""

    def __init__(self, side: str, server: RedisServer, directory: Path, shape: Shape) -> None:
        self.side = side
        self.shape = shape
        self.url = server.url
        self.client = server.client()
        rate = f"{shape.rate}/s"
        env = {ENV: json.dumps({"side": side, "broker_url": server.url, "rate": rate})}
        (directory / "logs").mkdir(parents=True)
        ledger = LedgerWriter(directory, "orchestrator")

        def slot(name: str, role: str, command: Callable[[str], list[str]]) -> Slot:
            return Slot(name, role, command, env, directory, ledger, root=REPO_ROOT)

        self.workers = [
            slot(f"worker-{n}", WORKER, self.worker_command) for n in range(shape.workers)
        ]
        movers = shape.movers if side == "delayq" else 0
        self.movers = [slot(f"mover-{n}", MOVER, self.mover_command) for n in range(movers)]
        self.rng = random.Random(0)  # Slot.reap's; nothing restarts on its own here
        #: Each mover process's pid -> [its first heartbeat seen, its kill] (epoch s).
        self.lives: dict[int, list[float | None]] = {}

    def worker_command(self, incarnation: str) -> list[str]:
        return celery_command(
            APP_MODULE, "worker", "-P", "prefork", "-c", str(self.shape.concurrency),
            "-Q", QUEUE, "-n", f"{incarnation}@flow", "-l", "WARNING",
            "--without-mingle", "--without-gossip", "--without-heartbeat",
        )  # fmt: skip

    @staticmethod
    def mover_command(incarnation: str) -> list[str]:
        return celery_command(APP_MODULE, "delayq", "mover", "-l", "WARNING")

    def start(self) -> None:
        """Every worker, then every mover; back once all are ready (a mover: its first
        heartbeat in the store's registry)."""
        for worker in self.workers:
            worker.start()
        wait_until(
            lambda: self.client.scard(READY_KEY) >= len(self.workers),
            timeout=120,
            what=f"{len(self.workers)} {self.side} workers are ready",
            abort=self.exited,
        )
        for mover in self.movers:
            self.start_mover(mover)
        wait_until(
            lambda: all(up for up, _ in self.watch_movers().values()),
            timeout=60,
            what=f"{len(self.movers)} movers beat",
            abort=self.exited,
        )

    def exited(self) -> str | None:
        for slot in (*self.workers, *self.movers):
            if slot.incarnation and not slot.alive():  # started, and gone
                return f"{slot.incarnation} exited: {slot.log_path}"
        return None

    def start_mover(self, slot: Slot) -> None:
        slot.start()
        if slot.process is not None:
            self.lives[slot.process.pid] = [None, None]

    def watch_movers(self) -> dict[int, list[float | None]]:
        """Note the first heartbeat of every mover process that has none yet (its first
        move pass is done: it is up); the lives so far."""
        waiting = [pid for pid, (up, _) in self.lives.items() if up is None]
        if waiting:
            beating = {json.loads(raw)["pid"] for raw in self.client.hvals(KeySpace().movers)}
            for pid in beating.intersection(waiting):
                self.lives[pid][0] = time.time()
        return self.lives

    def restart(self, slot: Slot) -> None:
        """A chaos kill: SIGKILL ``slot``'s process group, then start it again."""
        process = slot.process
        if process is not None:
            self.lives[process.pid][1] = time.time()
        slot.kill()
        if process is not None:
            process.wait()
        slot.reap(self.rng, restart=False)
        self.start_mover(slot)

    def mover_lives(self) -> list[tuple[float, float]]:
        """(up, down) of every mover that came up; one still running is down now."""
        now = time.time()
        return [(up, down or now) for up, down in self.lives.values() if up is not None]

    def run(self) -> Observed:
        """Send every message at once, kill a mover every ``KILL_EVERY`` s until every one
        ran (or the deadline), then wait until nothing is left that could run."""
        app = make_app(self.side, self.url, f"{self.shape.rate}/s")
        try:
            load = os.getloadavg()[0]
            sent_at = time.time()
            task = app.tasks[TASK]
            sent = [task.delay().id for _ in range(self.shape.messages)]
            log(f"{self.side}: sent {len(sent):,} in {time.time() - sent_at:.1f} s")
            kills = self.wait_for_runs()
            unsettled = None
            try:
                wait_until_quiescent(app, workers=len(self.workers), timeout=60)
            except TimeoutError as exc:
                unsettled = str(exc)
            return Observed(
                side=self.side,
                sent_at=sent_at,
                sent=sent,
                starts=[self.start_of(entry) for entry in self.entries(STARTS_KEY)],
                releases=self.releases(),
                kills=kills,
                mover_lives=self.mover_lives(),
                unsettled=unsettled,
                load=(load, os.getloadavg()[0]),
            )
        finally:
            app.close()

    def wait_for_runs(self) -> int:
        """Until every message ran (or none ran for ``STALL`` s: the rest would not), a
        mover SIGKILLed and started again every ``KILL_EVERY`` s, the movers in turn; the
        kills."""
        begun = time.time()  # the kills count from here: the send itself took a while
        kills, seen = 0, (0, begun)  # runs so far, and when that count was new

        def next_event() -> str | None:
            nonlocal seen
            runs, now = int(self.client.llen(STARTS_KEY)), time.time()
            self.watch_movers()
            if runs >= self.shape.messages:
                return "done"
            if runs != seen[0]:
                seen = (runs, now)
            if now - seen[1] > STALL:
                return "stalled"
            if self.movers and now >= begun + KILL_EVERY * (kills + 1):
                return "kill"
            return None

        while wait_until(next_event, timeout=MOST_SECONDS, interval=0.05) == "kill":
            self.restart(self.movers[kills % len(self.movers)])
            kills += 1
        log(f"{self.side}: {self.client.llen(STARTS_KEY):,} runs, {kills} mover kills")
        return kills

    def entries(self, key: str) -> list[str]:
        raw = self.client.lrange(key, 0, -1)
        return [entry.decode() if isinstance(entry, bytes) else entry for entry in raw]

    @staticmethod
    def start_of(entry: str) -> tuple[float, str]:
        at, _, task_id = entry.partition(" ")
        return float(at), task_id

    def releases(self) -> list[float]:
        """The release log's times (epoch s) of ``TASK``'s bucket (none on vanilla)."""
        entries = self.entries(KeySpace().for_queue(QUEUE).gates + "log")
        return [
            int(us) / 1e6
            for us, _, bucket in (entry.partition(" ") for entry in entries)
            if bucket == TASK
        ]

    def stop(self) -> None:
        for slot in (*self.movers, *self.workers):
            slot.stop()


def run_side(side: str, shape: Shape, directory: Path) -> Observed:
    log(f"{side}: {shape.workers} workers -c {shape.concurrency}, {shape.messages:,} messages")
    with RedisServer() as server, ExitStack() as stack:
        run = SideRun(side, server, directory / side, shape)
        stack.callback(run.stop)
        run.start()
        observed = run.run()
    raw = directory / f"{side}.json"  # for a closer look: every start and release
    raw.write_text(
        json.dumps(
            {
                "starts": observed.starts,
                "releases": observed.releases,
                "mover_lives": observed.mover_lives,
            }
        )
    )
    return observed


def per_second(times: Sequence[float], origin: float) -> tuple[list[float], list[float]]:
    """How many of ``times`` fall in each whole second after ``origin``: (the second's
    middle, count)."""
    if not times:
        return [], []
    counts = Counter(int(at - origin) for at in times)
    seconds = range(min(counts), max(counts) + 1)
    return [s + 0.5 for s in seconds], [float(counts[s]) for s in seconds]


def draw(path: Path, observed: dict[str, Observed], rate: int) -> Path | None:
    series: dict[str, tuple[list[float], list[float]]] = {}
    if "delayq" in observed:
        delayq = observed["delayq"]
        series["celery-delayq: releases"] = per_second(delayq.releases, delayq.sent_at)
        series["celery-delayq: starts"] = per_second(
            [at for at, _ in delayq.starts], delayq.sent_at
        )
    if "celery" in observed:
        celery = observed["celery"]
        series["vanilla Celery: starts"] = per_second(
            [at for at, _ in celery.starts], celery.sent_at
        )
    return plots.lines(
        path,
        series,
        title=f"A task limited to {rate}/s over several workers",
        xlabel="seconds since the messages were sent (each second at its middle)",
        ylabel="releases, starts in each second",
        logx=True,  # vanilla's first seconds and both sides' whole runs
        hline=(rate, f"the limit, {rate}/s"),
        marker=None,
    )


def goal_misses(
    figures: dict[str, Figures], observed: dict[str, Observed], shape: Shape, rate_goal: bool
) -> list[str]:
    """Where celery-delayq misses its goal, one line each (``rate_goal``: its release
    rate too, on a full run)."""
    if "delayq" not in figures:
        return []
    f, unsettled = figures["delayq"], observed["delayq"].unsettled
    checks = [
        (f.release_windows_over, f"{f.release_windows_over} release windows over {shape.rate}"),
        (f.start_windows_over, f"{f.start_windows_over} start windows over {shape.rate + 1}"),
        (f.lost, f"{f.lost} lost"),
        (f.doubles, f"{f.doubles} doubled"),
        (f.releases != f.sent, f"{f.releases} releases logged for {f.sent} sent"),
        (unsettled, f"not quiescent: {unsettled}"),
        (
            rate_goal and (f.release_rate or 0) < LEAST_RATE * shape.rate,
            f"a release rate of {f.release_rate or 0:.2f}/s",
        ),
    ]
    misses = [miss for failed, miss in checks if failed]
    return misses


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}/s"


def table(figures: dict[str, Figures], rate: int) -> list[str]:
    """The two sides' figures, vanilla Celery first."""
    sides = [side for side in ("celery", "delayq") if side in figures]

    def row(label: str, *values: str) -> str:
        return f"| {label} | " + " | ".join(values) + " |"

    def each(value: Callable[[Figures], str]) -> list[str]:
        return [value(figures[side]) for side in sides]

    return [
        row("measure", *(LABELS[side] for side in sides)),
        "|---|" + "---:|" * len(sides),
        row("messages sent / ran", *each(lambda f: f"{f.sent:,} / {f.ran:,}")),
        row("lost / doubled", *each(lambda f: f"{f.lost} / {f.doubles}")),
        row(
            "releases logged by the store",
            *each(lambda f: f"{f.releases:,}" if f.releases else "n/a"),
        ),
        row(
            f"most releases in a 1-s window (limit {rate})",
            *each(lambda f: "n/a" if f.most_releases is None else str(f.most_releases)),
        ),
        row(
            f"release windows over {rate}",
            *each(lambda f: "n/a" if f.most_releases is None else str(f.release_windows_over)),
        ),
        row("release rate, first to last", *each(lambda f: _rate(f.release_rate))),
        row(
            "no mover up (one killed, the other not yet started), first to last release",
            *each(lambda f: "n/a" if f.no_mover is None else f"{f.no_mover:.1f} s"),
        ),
        row(
            "release rate, first to last, less the time no mover was up",
            *each(lambda f: _rate(f.release_rate_with_mover)),
        ),
        row(
            "start − release, the k-th of each, p50 / p99 / max",
            *each(
                lambda f: (
                    "n/a" if f.pickup is None else "{:.1f} / {:.1f} / {:.1f} ms".format(*f.pickup)
                )
            ),
        ),
        row("most starts in a 1-s window", *each(lambda f: str(f.most_starts))),
        row(f"start windows over {rate + 1}", *each(lambda f: f"{f.start_windows_over:,}")),
        row("start rate, first to last", *each(lambda f: _rate(f.start_rate))),
        row(
            "most starts in a 1-s window / limit",
            *each(lambda f: f"{f.most_starts / rate:.2f}x"),
        ),
        row(
            "start rate / limit",
            *each(lambda f: "n/a" if f.start_rate is None else f"{f.start_rate / rate:.3f}x"),
        ),
        row("send to last start", *each(lambda f: f"{f.took:.1f} s")),
        row("standalone mover kills", *each(lambda f: str(f.kills) if f.releases else "n/a")),
    ]


def render(
    command: str,
    shape: Shape,
    figures: dict[str, Figures],
    observed: dict[str, Observed],
    misses: list[str],
    rate_goal: bool,
    took: float,
    plot: Path | None,
) -> str:
    loads = ", ".join(f"{side} {o.load[0]:.2f} → {o.load[1]:.2f}" for side, o in observed.items())
    lines = [
        "# A rate limit across workers: celery-delayq's flow control and Celery's `rate_limit`",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"({took:.0f} s in total).  ",
        f"{environment()}.  ",
        f"1-minute load average at each side's start → end: {loads}.",
        "",
        f"One task limited to {shape.rate}/s; {shape.messages:,} messages sent at once "
        f"(`.delay()`, no countdown); {shape.workers} prefork workers (`-c "
        f"{shape.concurrency}`), the sides one after the other, each on a private "
        "redis-server. celery-delayq: the limit in `delayq_rate_limits`, no worker mover "
        f"(`delayq_worker_mover = False`), {shape.movers} standalone movers (`celery delayq "
        f"mover`), one of them SIGKILLed and started again every {KILL_EVERY:g} s, in turn. "
        "Vanilla Celery: the task's own `rate_limit=\"10/s\"` on kombu's Redis transport.",
        "",
        "Releases: the store's release log (`P:{Q}:fc:log`, the Redis time of each release); "
        "starts: the time each run began, as the task recorded it. A window is half-open, "
        "`[t, t + 1 s)`; windows over: how many of the windows that start at a release "
        f"(start) hold more than {shape.rate} ({shape.rate + 1}). Rates: from the first to "
        "the last, while the backlog lasts (it lasts the whole run). A mover is up from its "
        "first heartbeat in the store (its first move pass done; looked for every 50 ms) to "
        "its kill; a release can only be late while none is. Lost: sent and never "
        "ran; doubled: runs beyond the first of a task id, counted once nothing was left "
        "that could run.",
        "",
        *table(figures, shape.rate),
    ]
    if "celery" in figures and "delayq" in figures:
        celery, delayq = figures["celery"], figures["delayq"]
        lines += [
            "",
            f"Ratios: the most starts in a 1-s window, vanilla / celery-delayq "
            f"{celery.most_starts / max(1, delayq.most_starts):.2f}x; start rate, vanilla / "
            f"celery-delayq {(celery.start_rate or 0) / (delayq.start_rate or 1):.2f}x. "
            f"Celery's `rate_limit` is each worker's own: {shape.workers} workers start up "
            f"to {shape.workers} x the limit.",
        ]
    if plot is not None:
        lines += ["", f"![{plot.stem}](plots/{plot.name})"]
    lines += [
        "",
        goal_line(
            f"no 1-s window with more than {shape.rate} releases or {shape.rate + 1} starts, "
            "nothing lost or doubled, every release logged, quiescent at the end"
            + (f", a release rate of at least {LEAST_RATE * shape.rate:g}/s" if rate_goal else ""),
            misses,
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    exit_on_termination()
    parser = option_parser(__doc__)
    parser.add_argument("--messages", type=int, help="messages sent (3,000; quick 100)")
    parser.add_argument("--side", action="append", choices=SIDES, help="only this side")
    options = parser.parse_args(argv)
    shape = QUICK if options.quick else FULL
    if options.messages:
        shape = replace(shape, messages=options.messages)
    started = time.time()
    directory = Path(tempfile.mkdtemp(prefix="delayq-flow-rate-"))
    log(f"logs and ledgers in {directory}")
    observed = {side: run_side(side, shape, directory) for side in options.side or SIDES}
    figures = {side: Figures.of(o, shape.rate) for side, o in observed.items()}
    rate_goal = not options.quick
    misses = goal_misses(figures, observed, shape, rate_goal)
    plot = None
    if not options.quick:  # a full run's plot, beside its report
        output = options.output or DEFAULT_OUTPUT
        plot = draw(output.parent / "plots" / "flow_rate.png", observed, shape.rate)
    command = " ".join(["python -m benchmarks.flow_rate", *(argv or sys.argv[1:])])
    took = time.time() - started
    report = render(command, shape, figures, observed, misses, rate_goal, took, plot)
    publish(report, options, DEFAULT_OUTPUT)
    for miss in misses:
        print(f"MISSED: celery-delayq: {miss}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
