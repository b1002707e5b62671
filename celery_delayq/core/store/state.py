"""What every facet of the store shares: one client, its keys and scripts, the hand-over.

The facets (writes, changes, moves, listing, counts, admin, dead letters) each hold
the one ``StoreState`` of their store, so none of them copies a setting or reaches
into another facet.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, cast

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from ..batching import ShardBatches
from ..layout.keys import KeySpace, QueueKeys
from ..layout.record import duplicate_key, extra_prefix, task_key
from ..lazy import first_use
from ..lua import StoreScripts

if TYPE_CHECKING:
    from ..handover import HandOver

#: Most entries one read of a task's extra messages (or records) returns.
READ_CHUNK = 1000


class ReplicaWait(NamedTuple):
    """How schedules wait for replicas (``WAIT replicas timeout_ms`` after the write)."""

    replicas: int
    timeout_ms: int


class StoreState:
    """The client, key names, scripts and settings of one store.

    On a cluster (``cluster``), no script touches the queue registry, which lives in
    another slot (see ``registry_in_scripts``).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: KeySpace,
        scripts: StoreScripts,
        make_handover: Callable[[], HandOver],
        batch: ShardBatches,
        cluster: bool,
        wait_for: ReplicaWait | None,
    ) -> None:
        self.client = client
        self.keys = keys
        self.scripts = scripts
        #: Makes the hand-over on the first move (``handover``): a process that only
        #: publishes never imports the handover/ package.
        self.make_handover = make_handover
        #: Sizes each move's batch (at most ``move_batch_size``) so that one call keeps
        #: Redis busy for at most ``move_call_budget`` seconds (0: always the full size).
        self.batch = batch
        self.cluster = cluster
        #: Schedules wait for this many replicas (None: they do not wait).
        self.wait_for = wait_for

    @first_use
    def handover(self) -> HandOver:
        return self.make_handover()

    def close_handover(self) -> None:
        """Close the hand-over, if one was made."""
        if "handover" in self.__dict__:
            self.handover.close()

    def queues(self) -> list[str]:
        """Names of the queues that have had delayed messages, sorted."""
        members = self.client.smembers(self.keys.queues)
        return sorted(q.decode() if isinstance(q, bytes) else q for q in members)

    def all_shards(self, queues: Iterable[str]) -> list[QueueKeys]:
        """Every shard of these queues."""
        return [keys for queue in queues for keys in self.keys.shards_of(queue)]

    def task_shards(self, task_id: str) -> list[QueueKeys]:
        """The shards that may hold a task's messages: in each queue its task id's shard,
        and every shard of a queue that has had messages placed by another key (keyed
        messages, periodic occurrences written ahead: ``Writes.register_off_shard``). So
        on a cluster a cancel of a task needs only the masters that may hold it."""
        queues = self.queues()
        if self.keys.shards == 1:
            return self.all_shards(queues)
        own = task_key(task_id)
        off_shard = self.client.smembers(self.keys.off_shard_queues)
        spread = {q.decode() if isinstance(q, bytes) else q for q in off_shard}
        return [
            keys
            for queue in queues
            for keys in (
                self.keys.shards_of(queue) if queue in spread else [self.keys.shard_of(queue, own)]
            )
        ]

    def server_time_ms(self) -> int:
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def registry_in_scripts(self) -> list[str]:
        """KEYS[5] of schedule.lua and purge.lua: the queue registry, unless it is in
        another cluster slot than the queue's keys."""
        return [] if self.cluster else [self.keys.queues]

    def message_keys(self, keys: QueueKeys, task_id: str) -> list[bytes]:
        """The message keys of a task: its own, and its duplicates' (if any), these read
        ``READ_CHUNK`` at a time: each read stays short however many there are."""
        own = task_key(task_id)
        prefix = extra_prefix(own)
        seqs = (cast(Optional[bytes], self.client.hget(keys.duplicates, own)) or b"").split()
        low = b"(" + prefix
        while True:
            members = cast(
                list[bytes],
                self.client.zrangebylex(keys.by_task, low, b"(" + prefix + b":", 0, READ_CHUNK),
            )
            seqs += [member[len(prefix) :] for member in members]
            if len(members) < READ_CHUNK:
                break
            low = b"(" + members[-1]
        return [own, *(duplicate_key(own, seq) for seq in seqs)]

    def run(self, script: Script, keys: QueueKeys, *args: Any) -> Any:
        """Run a per-queue script: KEYS are the queue's keys, ARGV the page arguments,
        then ``args``."""
        return self.call(script, keys.as_list(), [*keys.page_args(), *args])

    def call(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run a script on the node its keys name, alone: ``EVALSHA``, and after
        ``NOSCRIPT`` (a node that has not run it yet) ``EVAL``, which loads it there.
        redis-py's ``Script`` would load it with ``SCRIPT LOAD`` on every master of a
        cluster, which fails while any master is down."""
        try:
            return self.client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.client.execute_command("EVAL", script.script, len(keys), *keys, *args)
