"""The settings one benchmark run hands from the orchestrator to its worker subprocesses.

Workers are separate ``celery worker`` processes, so the settings travel as one JSON
environment variable; both sides build their Celery app from the same object, which
keeps publisher and workers from drifting apart.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: Which transport a run uses.
Side = Literal["vanilla", "delayq"]
SIDES: tuple[Side, ...] = ("vanilla", "delayq")

ENV_VAR = "DELAYQ_BENCH_CONFIG"
DELAYQ_TRANSPORT = "celery_delayq.transport:Transport"
#: Overrides delayq_move_ahead (seconds) on the delayq side, e.g. 0 to measure the move
#: at the due time as it was before move-ahead.
MOVE_AHEAD_ENV = "DELAYQ_BENCH_MOVE_AHEAD"


@dataclass(frozen=True)
class RunConfig:
    """One side of one scenario: broker, transport, queue and where tasks report."""

    broker_url: str
    side: Side
    queue: str
    #: Redis list every task execution appends a JSON record to.
    results_key: str
    #: Redis set a worker adds its pid to once it is ready to consume.
    ready_key: str
    #: ``broker_transport_options``; always identical for the two sides of a scenario.
    transport_options: dict[str, Any] = field(default_factory=dict)
    #: More Celery settings of the delayq side (e.g. flow-control limits).
    delayq_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def delayq(self) -> bool:
        return self.side == "delayq"

    def celery_settings(self) -> dict[str, Any]:
        """Celery settings; the transport line is the only difference between sides."""
        settings: dict[str, Any] = {
            "broker_url": self.broker_url,
            "broker_transport_options": dict(self.transport_options),
            "broker_connection_retry_on_startup": True,
            "task_default_queue": self.queue,
            "task_ignore_result": True,
            "enable_utc": True,
            "timezone": "UTC",
        }
        if self.delayq:
            settings["broker_transport"] = DELAYQ_TRANSPORT
            settings.update(self.delayq_settings)
            if MOVE_AHEAD_ENV in os.environ:  # a "before" run: python -m benchmarks ...
                settings["delayq_move_ahead"] = float(os.environ[MOVE_AHEAD_ENV])
        return settings

    def to_env(self) -> dict[str, str]:
        return {ENV_VAR: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> RunConfig:
        try:
            raw = environ[ENV_VAR]
        except KeyError:
            raise RuntimeError(
                f"{ENV_VAR} is not set: this module is meant to be loaded by worker "
                "subprocesses that `python -m benchmarks` starts"
            ) from None
        return cls(**json.loads(raw))


def restoring_every_second(visibility_timeout: float) -> dict[str, Any]:
    """Transport options for scenarios about kombu's restores of unacknowledged messages:
    looked for every second (kombu's default is every 10 s, one call in 10), so they show
    within a short run; the same for both sides."""
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }
