"""The three scenarios; each measures one side per call and declares its table rows."""

from __future__ import annotations

from typing import Any, Protocol

from ..harness import Run
from ..profiles import Profile
from ..report import MetricSpec
from .duplicates import Duplicates
from .lateness import Lateness
from .memory import WorkerMemory


class Scenario(Protocol):
    #: Short name, used on the command line and in queue names.
    key: str

    @property
    def title(self) -> str: ...

    @property
    def specs(self) -> tuple[MetricSpec, ...]: ...

    @property
    def transport_options(self) -> dict[str, Any]:
        """``broker_transport_options``, the same for both sides of the scenario."""
        ...

    def measure(self, run: Run) -> dict[str, float | None]:
        """Run the scenario on ``run``'s side; values keyed by ``MetricSpec.key``."""
        ...


SCENARIO_KEYS = ("memory", "duplicates", "lateness")


def build(profile: Profile, keys: tuple[str, ...] = SCENARIO_KEYS) -> list[Scenario]:
    """The selected scenarios, sized by ``profile``, in table order."""
    every: dict[str, Scenario] = {
        "memory": WorkerMemory(profile.memory_tasks),
        "duplicates": Duplicates(
            profile.duplicate_tasks, profile.duplicate_countdown, profile.visibility_timeout
        ),
        "lateness": Lateness(profile.lateness_tasks, profile.lateness_countdowns),
    }
    return [every[key] for key in SCENARIO_KEYS if key in keys]
