"""``python -m benchmarks.periodic_beats --django [--quick] [--duration S] [--output PATH]``:
django-celery-beat's rows, edited in the admin while beats are SIGKILLed, under
django-celery-beat's ``DatabaseScheduler`` and celery-delayq's scheduler side by side.

Each side: a private redis-server, its own Django database (an SQLite file, django-celery-beat's
migrations) with the same rows (benchmarks/periodic_django_admin.py: a 2-second interval and
a per-minute crontab in a time zone), one ``celery worker`` and ``BEATS`` ``celery beat``
processes of the example site. For ``--duration`` seconds, one beat of each side, in turn,
is SIGKILLed and started again every 5 s, and every 20 s each side's admin saves the rows
with a new version (and, every other time, the other interval).

A run stands for its occurrence (celery-delayq's header) or, for ``DatabaseScheduler``, the
slot of its version's interval it was sent in (whole multiples since the epoch). Doubles:
runs beyond the first of an occurrence or slot. Missed: slots with no run, from the gaps
between runs (a gap of more than 1.5 intervals; where the version changes, of the old
interval plus the new one). Old-version runs: runs whose occurrence (or sending) is later
than an edit's save plus the promise window, with an older version. The window is the
Django guide's "A change in the admin": a beat's pass (at most ``PASS_INTERVAL`` seconds
after the save) plus the settle window of the write; the same for both sides.

Exit status 1 when celery-delayq's side has a double, a miss or an old-version run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

from celery_delayq.beat import PASS_INTERVAL
from celery_delayq.testing import PRODUCER, RedisServer, celery_command

from .beat_chaos import DRAIN, KILL_EVERY, Side, Window, chaos, slot_time, start_all
from .harness import log
from .periodic_django_admin import (
    CRONTAB,
    CRONTAB_ZONE,
    EDIT_EVERY,
    EDITS_KEY,
    FIRST_EVERY,
    INTERVAL,
    OTHER_INTERVAL,
    SITE_KEY,
)
from .processes import REPO_ROOT
from .report import environment, goal_line
from .standalone import publish

DEFAULT_OUTPUT = Path(__file__).resolve().parent / "RESULTS-periodic-django.md"
SITE = "example_project.django_site"
SETTINGS = "benchmarks.periodic_django_site"
BEATS = 2
FULL, QUICK = 600.0, 60.0
#: (key, label, beat's scheduler, transport).
SCHEDULERS = (
    (
        "database",
        f"django-celery-beat {version('django-celery-beat')} `DatabaseScheduler`",
        "django_celery_beat.schedulers:DatabaseScheduler",
        "kombu",
    ),
    (
        "delayq",
        "celery-delayq (`celery_delayq.contrib.django_celery_beat:Scheduler`)",
        "celery_delayq.contrib.django_celery_beat:Scheduler",
        "delayq",
    ),
)

Run = dict[str, Any]
Edit = tuple[float, int]  # (saved at, version)


@dataclass(frozen=True)
class Tally:
    """One row's runs on one side, in the window."""

    runs: int
    doubles: int
    missed: int
    old: int
    checked: int  # runs later than an edit's window, whose version is checked
    #: The most seconds a run of an older version came after a save (its occurrence, or
    #: when it was sent).
    latest_old: float


def make_side(
    key: str, label: str, scheduler: str, transport: str, server: RedisServer, directory: Path
) -> Side:
    env = {
        "DJANGO_SETTINGS_MODULE": SETTINGS,
        "DJANGO_SITE_DB": str(directory / "site.sqlite3"),
        "REDIS_URL": server.url,
        "PERIODIC_DJANGO_TRANSPORT": transport,
    }

    def worker(incarnation: str) -> list[str]:
        return celery_command(
            SITE,
            "worker",
            "-P",
            "solo",
            "-n",
            f"{incarnation}@django",
            "-l",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        )

    def beat(incarnation: str) -> list[str]:
        schedule = directory / f"schedule-{incarnation}"  # beat's file, which neither reads
        return celery_command(
            SITE, "beat", "-S", scheduler, "-s", str(schedule), "--pidfile=", "-l", "INFO"
        )

    return Side(key, label, server, directory, env, worker, [beat] * BEATS)


def admin(*args: str) -> list[str]:
    """``python -m benchmarks.periodic_django_admin <args>`` (the last may be a Slot's
    incarnation, which it ignores)."""
    return [sys.executable, "-m", "benchmarks.periodic_django_admin", *args]


def set_up(side: Side) -> None:
    """The side's tables and rows, before any of its processes start."""
    env = {**os.environ, **side.env}
    log_path = side.directory / "logs" / "setup.log"
    with log_path.open("wb") as out:
        subprocess.run(
            admin("setup"), env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT, check=True
        )


def run_sides(sides: list[Side], duration: float) -> Window:
    """The chaos and the edits on every side at once; the window they measure."""
    for side in sides:
        set_up(side)
    start_all(sides, INTERVAL)
    start = time.time() + 1.0
    end = start + duration
    for side in sides:
        side.slot("admin", PRODUCER, partial(admin, "edit", f"{start}", f"{end}")).start()
    chaos(sides, start, end)
    for side in sides:
        side.all_down()
    time.sleep(DRAIN)
    return Window("chaos", start, end)


def slot_of(run: Run, every: float) -> Any:
    """What a run stands for: its occurrence, else the slot of its interval it was sent in."""
    return run["occurrence"] or (every, math.floor(slot_time(run) / every))


def tally(
    runs: Sequence[Run],
    edits: Sequence[Edit],
    every: dict[int, float],
    window: Window,
    promise: float,
) -> Tally:
    """``runs`` of one row; ``every``: the row's interval in each version."""
    inside = [run for run in runs if window.start <= slot_time(run) < window.end]
    first: dict[Any, Run] = {}
    for run in sorted(inside, key=slot_time):
        first.setdefault(slot_of(run, every[run["version"]]), run)
    # the window's edges count as runs of the first and the last version
    slots = sorted(first.values(), key=slot_time)
    versions = [run["version"] for run in slots] or [0]
    bounds = [(window.start, versions[0])]
    bounds += [(slot_time(run), run["version"]) for run in slots]
    bounds.append((window.end, versions[-1]))
    missed = sum(gap_missed(a, b, every) for a, b in zip(bounds, bounds[1:]))
    old = checked = 0
    latest_old = 0.0
    for run in inside:
        due = [v for at, v in edits if at + promise < slot_time(run)]
        if due:
            checked += 1
            old += run["version"] < max(due)
        newer = [at for at, v in edits if v > run["version"] and at < slot_time(run)]
        latest_old = max([latest_old, *(slot_time(run) - at for at in newer[:1])])
    return Tally(len(inside), len(inside) - len(first), missed, old, checked, latest_old)


def gap_missed(
    earlier: tuple[float, int], later: tuple[float, int], every: dict[int, float]
) -> int:
    """Slots missed between two runs (time, version): with one interval, a gap of more than
    1.5 of it misses one slot a whole interval; across versions, up to the old interval plus
    the new one is the switch (a new interval counts from the write)."""
    gap = later[0] - earlier[0]
    old, new = every[earlier[1]], every[later[1]]
    if earlier[1] == later[1]:
        return max(0, round(gap / new) - 1)
    return 0 if gap < old + new else max(1, round((gap - old) / new) - 1)


def measure(side: Side, window: Window, promise: float) -> dict[str, Tally]:
    saved = [json.loads(raw) for raw in side.client.lrange(EDITS_KEY, 0, -1)]
    runs = side.runs()
    tallies = {}
    for row in (INTERVAL, CRONTAB):
        edits = [(e["at"], e["version"]) for e in saved if e["row"] == row]
        every = {0: float(FIRST_EVERY[row])}
        every.update({e["version"]: float(e["every"]) for e in saved if e["row"] == row})
        mine = [run for run in runs if run["entry"] == row and run["version"] in every]
        tallies[row] = tally(mine, edits, every, window, promise)
    return tallies


def misses(tallies: dict[str, Tally]) -> list[str]:
    """Where celery-delayq's side misses 0 / 0 / 0 / 0, one line each (or its rows ran
    nothing after an edit: taken together, since in a quick run the per-minute row may
    run once, before the first edit)."""
    found = []
    for row, t in tallies.items():
        for count, what in (
            (t.doubles, "double(s)"),
            (t.missed, "missed"),
            (t.old, "old-version run(s)"),
        ):
            if count:
                found.append(f"{row}: {count} {what}")
    runs = sum(t.runs for t in tallies.values())
    checked = sum(t.checked for t in tallies.values())
    if not runs or not checked:
        found.append(f"nothing to check ({runs} runs, {checked} after an edit)")
    return found


def render(
    command: str,
    sides: list[Side],
    results: dict[str, dict[str, Tally]],
    window: Window,
    promise: float,
    loads: tuple[float, float],
    took: float,
) -> str:
    kills = ", ".join(f"{side.key} {side.kills}" for side in sides)
    edits = int(sides[0].client.llen(EDITS_KEY)) // 2 if sides else 0
    lines = [
        "# Periodic tasks edited in the Django admin under beat chaos: "
        "`DatabaseScheduler` against celery-delayq",
        "",
        f"Generated by `{command}` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC "
        f"({took:.0f} s in total; load average {loads[0]:.2f} at the start, {loads[1]:.2f} at "
        "the end).  ",
        f"{environment()}; django-celery-beat {version('django-celery-beat')}, "
        f"Django {version('django')}.",
        "",
        "Each scheduler: a private redis-server, its own Django database (SQLite, "
        "django-celery-beat's migrations) with the same two `PeriodicTask` rows, one "
        f"`celery worker -P solo` and {BEATS} `celery beat` processes of the example site, both "
        "schedulers at once on the same machine; `DatabaseScheduler` on kombu's own Redis "
        "transport, celery-delayq's on its own. Rows: `interval` (an `IntervalSchedule` of "
        f"{FIRST_EVERY[INTERVAL]} s, switched between {FIRST_EVERY[INTERVAL]} and "
        f"{OTHER_INTERVAL} s by every other edit) and `crontab` (a per-minute "
        f"`CrontabSchedule` in {CRONTAB_ZONE}). Chaos: one beat of each scheduler, in turn, "
        f"SIGKILLed and started again every {KILL_EVERY:g} s for {window.end - window.start:.0f} "
        f"s (kills: {kills}). Admin edits: every {EDIT_EVERY:g} s, each side's rows saved "
        "through the ORM, as the admin's change form does, with a new `version` keyword "
        f"argument ({edits} edits of both rows).",
        "",
        "A run stands for its occurrence (celery-delayq's `delayq-occurrence` header) or, for "
        "`DatabaseScheduler`, the slot of its version's interval it was sent in. Doubles: runs "
        "beyond the first of an occurrence or slot. Missed: slots with no run (a gap between "
        "runs of more than 1.5 intervals; where the version changes, of more than the old "
        "interval plus the new one). Old-version runs: runs due (or, for `DatabaseScheduler`, "
        f"sent) more than {promise:g} s after an edit was saved, with an older version: a "
        f"beat's pass ({PASS_INTERVAL:g} s at most, `DatabaseScheduler`'s `max_interval` too) "
        f"plus celery-delayq's settle window ({promise - PASS_INTERVAL:g} s), the Django "
        "guide's promise, the same for both.",
        "",
        "| scheduler | row | runs | doubles | missed | old-version runs after an edit "
        "(of runs checked) | an older version's last run after a save |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        for row, t in results[side.key].items():
            latest = f"{t.latest_old:.1f} s" if t.latest_old else "none"
            lines.append(
                f"| {side.label} | `{row}` | {t.runs:,} | {t.doubles:,} | {t.missed:,} "
                f"| {t.old:,} ({t.checked:,}) | {latest} |"
            )
    found = misses(results.get("delayq", {}))
    lines += [
        "",
        goal_line("0 doubles, 0 missed, 0 old-version runs after an edit", found),
        "",
    ]
    return "\n".join(lines)


def main(options: argparse.Namespace, argv: Sequence[str]) -> int:
    duration = options.duration or (QUICK if options.quick else FULL)
    started, load_start = time.time(), os.getloadavg()[0]
    directory = Path(tempfile.mkdtemp(prefix="delayq-periodic-django-"))
    log(f"logs and ledgers in {directory}")
    with ExitStack() as stack:
        sides = []
        for key, label, scheduler, transport in SCHEDULERS:
            server = stack.enter_context(RedisServer())
            side = make_side(key, label, scheduler, transport, server, directory / key)
            stack.callback(side.stop)
            sides.append(side)
        window = run_sides(sides, duration)
        settle = float(sides[-1].client.hget(SITE_KEY, "settle") or 0)
        promise = PASS_INTERVAL + settle
        results = {side.key: measure(side, window, promise) for side in sides}
        command = " ".join(["python -m benchmarks.periodic_beats", *argv])
        loads = (load_start, os.getloadavg()[0])
        report = render(command, sides, results, window, promise, loads, time.time() - started)
    publish(report, options, DEFAULT_OUTPUT)
    found = misses(results["delayq"])
    for miss in found:
        print(f"MISSED: celery-delayq: {miss}", file=sys.stderr)
    return 1 if found else 0
