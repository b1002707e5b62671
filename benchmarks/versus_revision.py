"""One benchmark, this tree against an earlier revision, run alternately in one sitting.

A change that should not change behaviour (a restructure, say) must not cost speed. Run
at different times, two results differ by what else the machine did; run alternately,
the noise falls on both sides alike. So this runs the same benchmark command in a
``git worktree`` of ``--before`` and in this tree, one after the other, ``--rounds``
times, and reports each metric's median on both sides and their ratio::

    python -m benchmarks.versus_revision --before bd968c5 --rounds 3 \\
        --output benchmarks/RESULTS-versus.md -- -m benchmarks --scenario burst

Everything after ``--`` goes to ``python`` in each tree, with ``--output FILE`` added:
any benchmark of this folder that writes a markdown report of ``| scenario | metric |
value... |`` rows works. Both sides run on this virtualenv's Python and packages; the
earlier tree's own ``celery_delayq`` is put first on ``PYTHONPATH`` (an editable
install's finder comes after it).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (scenario, metric, column title) -> value
Figures = dict[tuple[str, str, str], float]

NUMBER = re.compile(r"^-?[\d,]*\.?\d+$")


def figures_of(markdown: str) -> Figures:
    """The numbers of a report's table rows, by scenario, metric and column title; a row
    with an empty scenario cell belongs to the scenario above it."""
    found: Figures = {}
    scenario = ""
    titles: list[str] = []
    for line in markdown.splitlines():
        if not line.startswith("|"):
            titles = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not titles:
            titles = cells
            continue
        if len(cells) < 3 or (cells[0] and set(cells[0]) <= {"-", ":"}):
            continue
        scenario = cells[0] or scenario
        for title, cell in zip(titles[2:], cells[2:]):
            value = cell.removesuffix("x").strip()
            if NUMBER.match(value):
                found[(scenario, cells[1], title)] = float(value.replace(",", ""))
    return found


def run_side(tree: Path, python_args: list[str], output: Path) -> Figures:
    """Run the benchmark in ``tree``; its figures."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, *python_args, "--output", str(output)]
    print(f"== {tree}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=tree, env=env, check=True)
    return figures_of(output.read_text())


def comparison(before: list[Figures], after: list[Figures], header: str) -> str:
    """A markdown table: each figure's median before and after, and their ratio."""
    keys = sorted(set().union(*before, *after))
    rows = [
        header,
        "",
        "| scenario | metric | column | before (median) | after (median) | after / before |",
        "|---|---|---:|---:|---:|---:|",
    ]
    medians: dict[str, Figures] = defaultdict(dict)
    for side, runs in (("before", before), ("after", after)):
        for key in keys:
            values = [run[key] for run in runs if key in run]
            if values:
                medians[side][key] = statistics.median(values)
    for key in keys:
        old, new = medians["before"].get(key), medians["after"].get(key)
        ratio = f"{new / old:.2f}x" if old and new is not None else "n/a"
        show = [f"{v:,.6g}" if v is not None else "n/a" for v in (old, new)]
        rows.append(f"| {key[0]} | {key[1]} | {key[2]} | {show[0]} | {show[1]} | {ratio} |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3, help="runs on each side, alternating")
    parser.add_argument("--output", type=Path, help="write the markdown comparison here")
    parser.add_argument("python_args", nargs="+", help="after --: what to run with python")
    args = parser.parse_args()
    # A stop by SIGTERM still removes the earlier revision's worktree (``finally``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="versus-") as tmp:
        before_tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(before_tree), args.before],
            cwd=ROOT,
            check=True,
        )
        try:
            before, after = [], []
            for round_ in range(args.rounds):
                before.append(run_side(before_tree, args.python_args, Path(tmp) / f"b{round_}.md"))
                after.append(run_side(ROOT, args.python_args, Path(tmp) / f"a{round_}.md"))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"`python {' '.join(args.python_args)}`, {args.rounds} rounds alternating, on {now}: "
        f"before = {args.before}, after = {head}; {os.cpu_count()} CPUs."
    )
    report = comparison(before, after, header)
    print(report)
    if args.output:
        args.output.write_text(report)


if __name__ == "__main__":
    main()
