"""``python -m chaos --duration SECONDS [--output chaos/RESULTS.md] [--seed N]``.

Exit status 0 when the run met its minimums with nothing lost and no duplicate caused
by the store or its movers; 1 otherwise (so it can gate CI).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from .config import RunOptions
from .run import main


def parse(argv: list[str]) -> tuple[RunOptions, Path | None, bool]:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description="Chaos harness for celery-delayq: producers, prefork workers, beat and a "
        "standalone mover under SIGKILLs and Redis restarts, kills and pauses; reports lost "
        "and duplicated tasks by cause. Run it from the repository root.",
    )
    parser.add_argument(
        "--duration", type=float, default=60.0, help="seconds of producing and chaos (default 60)"
    )
    parser.add_argument("--output", type=Path, help="write the Markdown report here")
    parser.add_argument("--seed", type=int, default=1, help="seed of every random choice")
    parser.add_argument(
        "--rate",
        type=float,
        default=200.0,
        help="tasks scheduled per second, all producers together",
    )
    parser.add_argument(
        "--workers-acks-late",
        type=int,
        default=2,
        metavar="N",
        help="workers with task_acks_late (default 2)",
    )
    parser.add_argument(
        "--workers-acks-early",
        type=int,
        default=2,
        metavar="N",
        help="workers without task_acks_late (default 2)",
    )
    parser.add_argument(
        "--worker-movers",
        type=int,
        default=2,
        metavar="N",
        help="workers that run a mover thread (default 2; beat and a standalone mover run too)",
    )
    parser.add_argument("--concurrency", type=int, default=2, help="pool size per worker")
    parser.add_argument(
        "--visibility-timeout",
        type=float,
        default=30.0,
        help="kombu visibility_timeout, seconds (default 30)",
    )
    parser.add_argument(
        "--inject-faults",
        action="store_true",
        help="self-check: drop or double one delayed publish in 1000, as a broken store "
        "would; the run must then FAIL, blaming exactly those on celery-delayq",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the run directory (ledger, logs) even when the run passes",
    )
    args = parser.parse_args(argv)
    if args.duration < 10:
        parser.error("--duration must be at least 10 seconds")
    options = RunOptions(
        duration=args.duration,
        seed=args.seed,
        rate=args.rate,
        acks_late=(True,) * args.workers_acks_late + (False,) * args.workers_acks_early,
        worker_movers=args.worker_movers,
        concurrency=args.concurrency,
        visibility_timeout=args.visibility_timeout,
        inject_faults=args.inject_faults,
    )
    return options, args.output, args.keep


if __name__ == "__main__":
    options, output, keep = parse(sys.argv[1:])
    command = shlex.join(["python", "-m", "chaos", *sys.argv[1:]])
    sys.exit(main(options, output, command, keep))
