"""``python -m benchmarks.periodic_beats [--quick] [--duration S] [--outage S] [--output PATH]``
(or ``--django``):
periodic tasks under beat chaos, three schedulers side by side in one run.

Each side has a private redis-server, one ``celery worker`` and three ``celery beat``
processes (benchmarks/periodic_app.py), all sides at once:

- Celery's ``PersistentScheduler``, a schedule file per beat process;
- celery-redbeat (``redbeat.RedBeatScheduler``, its defaults);
- celery-delayq (``-S delayq``): the entries in the store, occurrences written ahead.

Two entries: a 1-second interval and a per-minute ``crontab()``. Phase 1 (chaos): one beat
of each side, in turn, is SIGKILLed and started again every 5 s (the sides' kills are
staggered) for ``--duration`` seconds. Phase 2 (outage): every beat down for ``--outage``
seconds while the workers run; then one beat back for a while (``settle``).

Each run names the occurrence it stands for: celery-delayq's ``delayq-occurrence`` header;
for the other two, which send no such thing, the time its message was sent rounded to the
entry's grid (whole seconds, whole minutes). A slot of the grid run twice is a double
fire; a slot in a window with no run is missed. The gaps are between runs' start times.

``--django``: django-celery-beat's rows edited in the admin under beat chaos,
``DatabaseScheduler`` against celery-delayq's scheduler (benchmarks/periodic_django.py).

Exit status 1 when celery-delayq misses its goal: no double fire, no missed occurrence,
no gap longer than 1.5 intervals, and nothing missed through the outage (the other two
are expected to miss it, and are only reported); a crash fails the run too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

from celery_delayq.testing import RedisServer, celery_command, exit_on_termination

from .beat_chaos import DRAIN, KILL_EVERY, Side, Window, chaos, sleep_until, slot_time, start_all
from .harness import log
from .periodic_app import ENTRIES, ENV, QUEUE
from .report import environment, goal_line
from .standalone import publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-periodic.md"
APP = "benchmarks.periodic_app"
BEATS = 3
#: The goal for celery-delayq: the longest gap between runs, in intervals.
MOST_GAP = 1.5


@dataclass(frozen=True)
class Scheduler:
    key: str
    label: str
    #: ``celery beat`` options, given the side's directory and the beat's slot name.
    options: Callable[[Path, str], list[str]]


SCHEDULERS = (
    Scheduler(
        "persistent",
        "Celery `PersistentScheduler` (a schedule file per beat)",
        lambda directory, slot: [
            "-S",
            "celery.beat:PersistentScheduler",
            "-s",
            str(directory / f"schedule-{slot}"),
        ],
    ),
    Scheduler(
        "redbeat",
        f"celery-redbeat {version('celery-redbeat')} (defaults)",
        lambda directory, slot: ["-S", "redbeat.RedBeatScheduler"],
    ),
    Scheduler("delayq", "celery-delayq (`-S delayq`)", lambda directory, slot: ["-S", "delayq"]),
)
BY_KEY = {scheduler.key: scheduler for scheduler in SCHEDULERS}


@dataclass(frozen=True)
class Timing:
    """How long each phase lasts (seconds)."""

    duration: float
    outage: float
    settle: float


FULL = Timing(duration=600.0, outage=120.0, settle=15.0)
QUICK = Timing(duration=30.0, outage=15.0, settle=10.0)


def worker_command(incarnation: str) -> list[str]:
    return celery_command(
        APP,
        "worker",
        "-P",
        "solo",
        "-Q",
        QUEUE,
        "-n",
        f"{incarnation}@periodic",
        "-l",
        "WARNING",
        "--without-mingle",
        "--without-gossip",
        "--without-heartbeat",
    )


def beat_command(scheduler: Scheduler, directory: Path, slot: str) -> Callable[[str], list[str]]:
    def command(incarnation: str) -> list[str]:
        options = scheduler.options(directory, slot)
        return celery_command(APP, "beat", *options, "--pidfile=", "-l", "INFO")

    return command


def make_side(scheduler: Scheduler, server: RedisServer, directory: Path) -> Side:
    env = {ENV: json.dumps({"scheduler": scheduler.key, "broker_url": server.url})}
    beats = [beat_command(scheduler, directory, f"beat-{n}") for n in range(BEATS)]
    return Side(scheduler.key, scheduler.label, server, directory, env, worker_command, beats)


@dataclass(frozen=True)
class Figures:
    """One entry of one side in one window."""

    runs: int
    ideal: int
    doubles: int
    missed: int
    longest_gap: float
    every: float

    @property
    def gap_intervals(self) -> float:
        return self.longest_gap / self.every


def figures(runs: Sequence[dict[str, Any]], every: float, window: Window) -> Figures:
    """Runs, ideal runs, double fires, missed slots and the longest gap of ``runs`` (one
    entry's) in ``window``. The grid: whole multiples of ``every`` since the epoch, or, for
    runs that carry their occurrence (an interval's start where its entry was made), those
    occurrences' own. The longest gap: the longest stretch of the window in which no run
    started (its edges bound the first and the last)."""
    carried = [slot_time(run) for run in runs if run.get("occurrence")]
    anchor = carried[0] % every if carried else 0.0
    ran = Counter(round((slot_time(run) - anchor) / every) for run in runs)
    first = math.ceil((window.start - anchor) / every)
    last = math.ceil((window.end - anchor) / every)
    counts = [ran[slot] for slot in range(first, last)]
    inside = (float(run["at"]) for run in runs)
    bounds = sorted([window.start, *(at for at in inside if window.start < at < window.end)])
    bounds.append(window.end)
    return Figures(
        runs=sum(counts),
        ideal=len(counts),
        doubles=sum(count - 1 for count in counts if count > 1),
        missed=counts.count(0),
        longest_gap=max(later - earlier for earlier, later in zip(bounds, bounds[1:])),
        every=every,
    )


def run_sides(sides: list[Side], timing: Timing) -> list[Window]:
    """Both phases on every side at once; the windows they measure."""
    start_all(sides, "every-second")
    start = time.time() + 1.0
    chaos(sides, start, start + timing.duration)
    for side in sides:
        side.all_down()
    down = time.time()
    log(f"outage: every beat down for {timing.outage:g} s")
    sleep_until(down + timing.outage)
    up = time.time()
    for side in sides:
        side.beats[0].start()
    log(f"one beat back; settling {timing.settle:g} s")
    sleep_until(up + timing.settle)
    end = time.time()
    for side in sides:
        side.all_down()
    time.sleep(DRAIN)
    return [
        Window("chaos", start, down),
        Window("outage", down, up),
        Window("whole run", start, end),
    ]


Results = dict[str, dict[str, dict[str, Figures]]]  # scheduler -> entry -> window -> figures


def measure(sides: list[Side], windows: list[Window]) -> Results:
    results: Results = {}
    for side in sides:
        runs = side.runs()
        results[side.key] = {
            entry: {
                window.name: figures([r for r in runs if r["entry"] == entry], every, window)
                for window in windows
            }
            for entry, every in ENTRIES.items()
        }
    return results


def goal_misses(results: Results) -> list[str]:
    """Where celery-delayq misses its goal, one line each."""
    misses = []
    for entry, by_window in results.get("delayq", {}).items():
        whole, outage = by_window["whole run"], by_window["outage"]
        if whole.doubles:
            misses.append(f"{entry}: {whole.doubles} double fire(s)")
        if whole.missed:
            misses.append(f"{entry}: {whole.missed} missed occurrence(s)")
        if whole.gap_intervals > MOST_GAP:
            misses.append(f"{entry}: a gap of {whole.gap_intervals:.2f} intervals")
        if outage.missed:
            misses.append(f"{entry}: {outage.missed} missed through the outage")
    return misses


def render(
    command: str,
    sides: list[Side],
    results: Results,
    windows: list[Window],
    timing: Timing,
    took: float,
) -> str:
    lengths = ", ".join(f"{w.name} {w.end - w.start:.0f} s" for w in windows)
    kills = ", ".join(f"{side.key} {side.kills}" for side in sides)
    lines = [
        "# Periodic tasks under beat chaos: three schedulers side by side",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"({took:.0f} s in total).  ",
        f"{environment()}; celery-redbeat {version('celery-redbeat')}.",
        "",
        f"Each scheduler: a private redis-server, one `celery worker -P solo` and {BEATS} "
        "`celery beat` processes, all schedulers at once on the same machine. Entries: "
        "`every-second` (a 1-second interval) and `every-minute` (`crontab()`). Chaos: one "
        f"beat of each scheduler, in turn, SIGKILLed and started again every {KILL_EVERY:g} s "
        f"for {timing.duration:g} s (kills: {kills}); outage: every beat down for "
        f"{timing.outage:g} s, the worker running; then one beat back for {timing.settle:g} s. "
        f"Windows: {lengths}.",
        "",
        "celery-redbeat's defaults: a lock of 5 × `beat_max_interval` (Celery's default, "
        "300 s), 1,500 s; while a SIGKILLed holder's lock lasts, no other beat sends anything "
        "(the 25 s of issue 28's table is with `beat_max_interval = 5`).",
        "",
        "A run's occurrence is celery-delayq's `delayq-occurrence` header; for the other two "
        "(no such header) the time its message was sent, rounded to the entry's grid (whole "
        "seconds, whole minutes). Double fires: runs beyond the first of a slot; missed: "
        "slots of the window with no run; longest gap: the longest stretch of the window in "
        "which no run started (the window's edges bound the first and the last).",
        "",
        "| scheduler | entry | window | runs | ideal | double fires | missed "
        "| longest gap (s) | longest gap (intervals) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        for entry, by_window in results[side.key].items():
            for name, f in by_window.items():
                lines.append(
                    f"| {side.label} | `{entry}` | {name} | {f.runs:,} | {f.ideal:,} "
                    f"| {f.doubles:,} | {f.missed:,} | {f.longest_gap:.1f} "
                    f"| {f.gap_intervals:.2f} |"
                )
    misses = goal_misses(results)
    lines += [
        "",
        goal_line(
            f"0 double fires, 0 missed, the longest gap at most {MOST_GAP:g} intervals "
            "(whole run), 0 missed through the outage",
            misses,
        ),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.periodic_beats", description=(__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="a CI smoke run, about 70 s (80 s with --django)"
    )
    parser.add_argument(
        "--django",
        action="store_true",
        help="django-celery-beat's rows edited under chaos: DatabaseScheduler against "
        "celery-delayq's (benchmarks/periodic_django.py)",
    )
    parser.add_argument(
        "--duration", type=float, help="seconds of chaos (default 600; quick 30, with --django 60)"
    )
    parser.add_argument("--outage", type=float, help="seconds every beat is down (120; quick 15)")
    parser.add_argument("--output", type=Path, help=f"default: {DEFAULT_OUTPUT.name} (full run)")
    parser.add_argument(
        "--scheduler",
        action="append",
        choices=list(BY_KEY),
        help="run only this one (repeatable; default: all three)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    exit_on_termination()
    options = parse_args(argv)
    if options.django:
        from .periodic_django import main as django

        return django(options, list(sys.argv[1:] if argv is None else argv))
    base = QUICK if options.quick else FULL
    timing = Timing(
        duration=base.duration if options.duration is None else options.duration,
        outage=base.outage if options.outage is None else options.outage,
        settle=base.settle,
    )
    chosen = [BY_KEY[key] for key in options.scheduler or BY_KEY]
    started = time.time()
    directory = Path(tempfile.mkdtemp(prefix="delayq-periodic-"))
    log(f"logs and ledgers in {directory}")
    with ExitStack() as stack:
        sides = []
        for scheduler in chosen:
            server = stack.enter_context(RedisServer())
            side = make_side(scheduler, server, directory / scheduler.key)
            stack.callback(side.stop)
            sides.append(side)
        windows = run_sides(sides, timing)
        results = measure(sides, windows)
    command = " ".join(["python -m benchmarks.periodic_beats", *(argv or sys.argv[1:])])
    report = render(command, sides, results, windows, timing, time.time() - started)
    publish(report, options, DEFAULT_OUTPUT)
    misses = goal_misses(results)
    for miss in misses:
        print(f"MISSED: celery-delayq: {miss}", file=sys.stderr)
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
