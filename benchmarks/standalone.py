"""What the stand-alone benchmarks (``python -m benchmarks.bulk``, ``.schedule_cost``,
``.move_cost``) share: their two options, and where their report goes."""

from __future__ import annotations

import argparse
from pathlib import Path


def parse_options(doc: str | None) -> argparse.Namespace:
    """``--quick`` (small counts, no report file) and ``--output PATH``."""
    return option_parser(doc).parse_args()


def option_parser(doc: str | None) -> argparse.ArgumentParser:
    """The parser of ``--quick`` and ``--output``, for a benchmark with options of its own
    too; the description is the first paragraph of the benchmark's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, no report file")
    parser.add_argument("--output", type=Path)
    return parser


def publish(report: str, options: argparse.Namespace, default_output: Path) -> None:
    """Print the report; write it to ``--output``, or on a full run to ``default_output``."""
    print(report)
    output = options.output or (None if options.quick else default_output)
    if output:
        output.write_text(report)
