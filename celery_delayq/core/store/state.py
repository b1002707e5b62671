"""What every facet of the store shares: one client, its keys and scripts, the hand-over.

The facets (writes, changes, moves, listing, counts, admin, dead letters) each hold
the one ``StoreState`` of their store, so none of them copies a setting or reaches
into another facet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional, cast

import redis
from redis.commands.core import Script

from ..batching import BatchSizer
from ..handover import HandOver
from ..keys import KeySpace, QueueKeys
from ..lua_scripts import StoreScripts
from ..record import duplicate_key, task_key


@dataclass(frozen=True)
class ReplicaWait:
    """How schedules wait for replicas (``WAIT replicas timeout_ms`` after the write)."""

    replicas: int
    timeout_ms: int


@dataclass
class StoreState:
    """The client, key names, scripts and settings of one store.

    On a cluster (``cluster``), no script touches the queue registry, which lives in
    another slot (see ``registry_in_scripts``).
    """

    client: redis.Redis
    keys: KeySpace
    scripts: StoreScripts
    handover: HandOver
    #: Sizes each move's batch (at most ``move_batch_size``) so that one call keeps
    #: Redis busy for at most ``move_call_budget`` seconds (0: always the full size).
    batch: BatchSizer
    cluster: bool
    #: Schedules wait for this many replicas (None: they do not wait).
    wait_for: ReplicaWait | None

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def all_shards(self, queues: Iterable[str]) -> list[QueueKeys]:
        """Every shard of these queues."""
        return [keys for queue in queues for keys in self.keys.shards_of(queue)]

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def registry_in_scripts(self) -> list[str]:
        """KEYS[5] of schedule.lua and purge.lua: the queue registry, unless it is in
        another cluster slot than the queue's keys."""
        return [] if self.cluster else [self.keys.queues]

    def message_keys(self, keys: QueueKeys, task_id: str) -> list[bytes]:
        """The message keys of a task: its own, and its duplicates' (if any)."""
        own = task_key(task_id)
        seqs = cast(Optional[bytes], self.client.hget(keys.duplicates, own))
        return [own, *(duplicate_key(own, seq) for seq in (seqs or b"").split())]

    def run(self, script: Script, keys: QueueKeys, *args: Any) -> Any:
        """Run a per-queue script: KEYS are the queue's keys, ARGV the page arguments,
        then ``args``."""
        return script(keys=keys.as_list(), args=[*keys.page_args(), *args])
