"""``SlotMigration``: one slot resharded live, a batch of keys at a time, as
``redis-cli --cluster reshard`` does it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..redis_server import RedisServer
from .cluster_slots import HOST


class Cluster(Protocol):
    """What a migration asks of ``RedisClusterServers`` (named here, not imported: the
    cluster makes migrations, so importing it back would close an import circle)."""

    def node_id(self, server: RedisServer) -> str: ...
    def masters(self) -> list[RedisServer]: ...
    def wait_until_consistent(self, timeout: float = 30.0) -> Any: ...
    def _ask(self, server: RedisServer, *command: Any) -> Any: ...


@dataclass
class SlotMigration:
    """One slot on its way from ``source`` to ``target``, moved a batch of keys at a time
    so that a test can run load between the steps. Meanwhile the source answers for the
    keys it still holds and sends ASK for the others; ``finish`` hands the slot over."""

    cluster: Cluster
    slot: int
    source: RedisServer
    target: RedisServer
    #: MIGRATE's timeout for one batch, in milliseconds.
    timeout_ms: int = 5000

    def move_keys(self, batch: int = 100) -> int:
        """MIGRATE up to ``batch`` keys of the slot from source to target, in one atomic
        step per batch; return how many were sent (0 once none is left on the source)."""
        keys = self._source("CLUSTER", "GETKEYSINSLOT", self.slot, batch)
        if keys:
            self._source("MIGRATE", HOST, self.target.port, "", 0, self.timeout_ms, "KEYS", *keys)
        return len(keys)

    def finish(self, timeout: float = 30.0) -> None:
        """Assign the slot to the target on the target, the source, then every other
        master, and wait until all nodes agree (replicas learn it by gossip)."""
        left = int(self._source("CLUSTER", "COUNTKEYSINSLOT", self.slot))
        if left:
            raise RuntimeError(
                f"slot {self.slot} still has {left} keys on {self.source.port}: "
                "call move_keys until it returns 0"
            )
        target_id = self.cluster.node_id(self.target)
        for master in self._masters_in_handover_order():
            self.cluster._ask(master, "CLUSTER", "SETSLOT", self.slot, "NODE", target_id)
        self.cluster.wait_until_consistent(timeout)

    def _masters_in_handover_order(self) -> list[RedisServer]:
        """Target first (it stops asking for ASKING), then the source (it stops sending
        ASK), then the rest (they stop sending MOVED to the source)."""
        ends = (self.source, self.target)
        return [self.target, self.source, *(m for m in self.cluster.masters() if m not in ends)]

    def _source(self, *command: Any) -> Any:
        return self.cluster._ask(self.source, *command)
