"""The scenarios; each measures one side per call and declares its table rows.

A scenario may also say which ``sides`` it runs (default both: celery-delayq-only
measurements such as the move rate have no vanilla counterpart) and draw ``plot``s
from what it measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..harness import Run
from ..profiles import Profile
from ..report import MetricSpec
from ..runconfig import SIDES, Side
from .burst import Burst
from .consume import Consume
from .duplicates import Duplicates
from .hotinstant import HotInstant
from .lateness import Lateness
from .longtasks import LongTasks
from .memory import WorkerMemory
from .producer import ProducerCost
from .recovery import Recovery
from .scaleout import ScaleOut
from .storecost import StoreCost
from .stream import SteadyStream
from .together import DueTogether


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


SCENARIO_KEYS = (
    "memory",
    "duplicates",
    "lateness",
    "stream",
    "together",
    "hotinstant",
    "burst",
    "producer",
    "storecost",
    "scaleout",
    "longtasks",
    "consume",
)
#: Scenarios that run only when named (``--scenario``): each takes too long for a full run.
OPT_IN_KEYS = ("recovery",)


def sides_of(scenario: Scenario) -> tuple[Side, ...]:
    return tuple(getattr(scenario, "sides", SIDES))


def draw(scenario: Scenario, directory: Path) -> list[Path]:
    """The scenario's plots, drawn into ``directory`` (none if it draws none)."""
    plot = getattr(scenario, "plot", None)
    return list(plot(directory)) if plot else []


def build(profile: Profile, keys: tuple[str, ...] = SCENARIO_KEYS) -> list[Scenario]:
    """The selected scenarios, sized by ``profile``, in table order."""
    every: dict[str, Scenario] = {
        "memory": WorkerMemory(profile.memory_backlogs, profile.memory_vanilla_max),
        "duplicates": Duplicates(
            profile.duplicate_tasks, profile.duplicate_countdown, profile.visibility_timeout
        ),
        "lateness": Lateness(profile.lateness_tasks, profile.lateness_countdowns),
        "stream": SteadyStream(profile.stream_rate, profile.stream_window),
        "together": DueTogether(profile.together_tasks, profile.together_rounds),
        "hotinstant": HotInstant(
            profile.hot_instant_sizes, profile.hot_instant_lead, profile.hot_instant_rounds
        ),
        "burst": Burst(profile.burst_messages, profile.burst_batch_sizes),
        "producer": ProducerCost(profile.producer_tasks, profile.producer_script_calls),
        "storecost": StoreCost(profile.store_cost_sizes),
        "scaleout": ScaleOut(profile.scaleout_messages),
        "longtasks": LongTasks(
            profile.long_tasks, profile.long_task_seconds, profile.long_task_visibility
        ),
        "consume": Consume(profile.consume_tasks),
        "recovery": Recovery(
            profile.recovery_held,
            {
                "vanilla": profile.recovery_vanilla_visibility,
                "delayq": profile.recovery_delayq_visibility,
            },
            profile.recovery_restore_interval,
        ),
    }
    known = SCENARIO_KEYS + OPT_IN_KEYS
    return [every[key] for key in known if key in keys and key not in profile.skip]
