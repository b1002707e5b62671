"""One snapshot of a store's state: backlog per queue and the movers, by the Redis clock.

``status``, ``doctor`` and the metrics all read it, so they agree on what "alive" and
"stranded" mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..heartbeats import is_alive
from ..results import QueueBacklog
from ..store import DelayedStore


@dataclass(frozen=True)
class StoreStatus:
    """Backlog and movers as read at ``now`` (Redis clock, epoch seconds)."""

    now: float
    backlog: list[QueueBacklog]
    movers: list[dict[str, Any]]  # heartbeats, each with "alive": bool added
    alive_within: float

    @property
    def alive(self) -> list[dict[str, Any]]:
        return [mover for mover in self.movers if mover["alive"]]

    @property
    def overdue(self) -> int:
        return sum(queue.overdue for queue in self.backlog)

    @property
    def stranded(self) -> bool:
        """Messages are overdue and no mover is alive to deliver them."""
        return bool(self.overdue and not self.alive)


def read_status(store: DelayedStore, alive_within: float) -> StoreStatus:
    backlog = store.backlog()
    now = store.server_time_ms() / 1000
    movers = [dict(beat, alive=is_alive(beat, now, alive_within)) for beat in store.movers.all()]
    return StoreStatus(now, backlog, movers, alive_within)
