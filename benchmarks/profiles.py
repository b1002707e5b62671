"""Problem sizes: the full run (about 5 minutes on 2 cores) and the --quick smoke run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    #: Scenario 1: tasks pending with countdown=3600 while the worker's RSS is read.
    memory_tasks: int
    #: Scenario 2: tasks whose countdown exceeds the broker's visibility timeout.
    duplicate_tasks: int
    duplicate_countdown: float
    visibility_timeout: float
    #: Scenario 3: tasks with countdowns spread uniformly over the range, idle worker.
    lateness_tasks: int
    lateness_countdowns: tuple[float, float]


FULL = Profile(
    name="full",
    memory_tasks=20_000,
    duplicate_tasks=50,
    duplicate_countdown=15.0,
    visibility_timeout=5.0,
    lateness_tasks=500,
    lateness_countdowns=(1.0, 10.0),
)

QUICK = Profile(
    name="quick",
    memory_tasks=2_000,
    duplicate_tasks=10,
    duplicate_countdown=4.0,
    visibility_timeout=2.0,
    lateness_tasks=50,
    lateness_countdowns=(0.5, 2.0),
)
