"""The delayed store: every read and write of delayed messages in Redis goes through here.

Each queue keeps its messages as records (layout/record.py) in one hash, and their due times in
small pages (lua/prelude.lua explains the layout, layout/keys.py names the keys). Every change
is one atomic Lua script, so movers, producers and operators never need a lock. Due
messages leave through the store's ``HandOver`` (handover/).

``DelayedStore`` is the front its callers hold. The work is done by its facets, one
module each, which share one ``StoreState`` (state.py): writes, changes (cancel,
reschedule), moves, listing, counts, admin (purge, repair), dead letters, flow control's
buckets, and periodic occurrences written ahead. Each facet but ``writes`` (and the
hand-over) is made, and its module imported, on first use: a process that only publishes
loads none of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

import redis

from ..batching import ShardBatches
from ..layout.keys import KeySpace, QueueKeys
from ..lazy import first_use, lazy_attributes
from ..lua import ScheduleCall, StoreScripts
from .state import ReplicaWait, StoreState
from .writes import ChunkPartlyStored, Scheduled, Writes

if TYPE_CHECKING:
    from redis.client import PubSub

    from ..handover import HandOver
    from ..heartbeats import MoverRegistry
    from ..layout.delay_keys import DelayKey, KeyedOutcome
    from ..layout.record import Record
    from ..results import (
        BucketState,
        DeadLetter,
        MoveResult,
        PendingMessage,
        Position,
        QueueBacklog,
        TaskFlow,
    )
    from .admin import Admin
    from .ahead import AheadOutcome, WriteAhead
    from .changes import Changes
    from .counts import Counts
    from .dead_letters import DeadLetters
    from .flow import FlowReader
    from .listing import Listing
    from .moves import Moves

#: Imported on first use, as the facets are: a process that only publishes needs none.
__getattr__ = lazy_attributes(__name__, {"AheadOutcome": ".ahead", "LISTING_CLAIM_MS": ".listing"})

__all__ = [
    "LISTING_CLAIM_MS",
    "AheadOutcome",
    "ChunkPartlyStored",
    "DelayedStore",
    "ReplicaWait",
    "Scheduled",
]


class DelayedStore:
    """Schedule, move, cancel and inspect delayed messages in one Redis or Redis Cluster.

    The one front every caller uses: each method hands the call to the facet that owns
    it (``writes``, ``changes``, ``moves``, ``listing``, ``counts``, ``admin``, ``dead``,
    ``flow``, ``ahead``), which only the store itself reaches (a test checks). A caller
    needs no knowledge of which module owns an operation, and the facets, made on first
    use, keep a publishing process's imports small. ``movers`` is no facet but the movers'
    heartbeat registry, which the store hands out.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: KeySpace,
        move_batch_size: int = 500,
        handover: HandOver | Callable[[], HandOver] | None = None,
        cluster: bool = False,
        wait_for: ReplicaWait | None = None,
        move_call_budget: float = 0.0,
    ) -> None:
        scripts = StoreScripts.register(client)
        self.state = StoreState(
            client,
            keys,
            scripts,
            _handover_maker(handover, client, scripts),
            ShardBatches(move_batch_size, move_call_budget),
            cluster,
            wait_for,
        )
        self.writes = Writes(self.state)

    # -- the facets, each made on first use

    @first_use
    def movers(self) -> MoverRegistry:
        from ..heartbeats import MoverRegistry

        return MoverRegistry(self.client, self.keys.movers)

    @first_use
    def changes(self) -> Changes:
        from .changes import Changes

        return Changes(self.state)

    @first_use
    def moves(self) -> Moves:
        from .moves import Moves

        return Moves(self.state)

    @first_use
    def listing(self) -> Listing:
        from .listing import Listing

        return Listing(self.state)

    @first_use
    def counts(self) -> Counts:
        from .counts import Counts

        return Counts(self.state)

    @first_use
    def admin(self) -> Admin:
        from .admin import Admin

        return Admin(self.state)

    @first_use
    def dead(self) -> DeadLetters:
        from .dead_letters import DeadLetters

        return DeadLetters(self.state)

    @first_use
    def flow(self) -> FlowReader:
        from .flow import FlowReader

        return FlowReader(self.state)

    @first_use
    def ahead(self) -> WriteAhead:
        from .ahead import WriteAhead

        return WriteAhead(self.state, self.writes)

    # -- the shared state, read-only

    @property
    def client(self) -> redis.Redis:
        return self.state.client

    @property
    def keys(self) -> KeySpace:
        return self.state.keys

    @property
    def scripts(self) -> StoreScripts:
        return self.state.scripts

    @property
    def handover(self) -> HandOver:
        return self.state.handover

    @property
    def batch(self) -> ShardBatches:
        return self.state.batch

    @property
    def move_batch_size(self) -> int:
        return self.state.batch.most

    @property
    def cluster(self) -> bool:
        return self.state.cluster

    @property
    def wait_for(self) -> ReplicaWait | None:
        return self.state.wait_for

    def queues(self) -> list[str]:
        return self.state.queues()

    def server_time_ms(self) -> int:
        return self.state.server_time_ms()

    def close(self) -> None:
        """Release the hand-over's broker connection, if it has one of its own (none
        if it was never made)."""
        self.state.close_handover()

    # -- writes.py

    def schedule_call(self, message: Scheduled, delay_key: DelayKey | None = None) -> ScheduleCall:
        return self.writes.schedule_call(message, delay_key)

    def schedule(self, message: Scheduled) -> bool:
        return self.writes.schedule(message)

    def schedule_keyed(self, message: Scheduled, delay_key: DelayKey) -> KeyedOutcome:
        return self.writes.schedule_keyed(message, delay_key)

    def schedule_many(self, messages: Iterable[Scheduled]) -> int:
        return self.writes.schedule_many(messages)

    def schedule_chunk(self, messages: Sequence[Scheduled]) -> None:
        self.writes.schedule_chunk(messages)

    # -- changes.py

    def cancel(self, task_id: str) -> int:
        return self.changes.cancel(task_id)

    def reschedule(
        self, task_id: str, due_ms: int, rewrite_payload: Callable[[bytes], bytes]
    ) -> int:
        return self.changes.reschedule(task_id, due_ms, rewrite_payload)

    # -- moves.py

    def move_due(self, queue: str) -> MoveResult:
        return self.moves.move_due(queue)

    def move_all_due(self) -> MoveResult:
        return self.moves.move_all_due()

    def wakeup_subscription(self) -> PubSub:
        return self.moves.wakeup_subscription()

    # -- listing.py

    def pending(
        self,
        *,
        queue: str | None = None,
        due_after: float | None = None,
        due_before: float | None = None,
        limit: int = 100,
        newest_first: bool = False,
        after: Position | None = None,
    ) -> list[PendingMessage]:
        return self.listing.pending(
            queue=queue,
            due_after=due_after,
            due_before=due_before,
            limit=limit,
            newest_first=newest_first,
            after=after,
        )

    def find(self, task_id: str) -> list[PendingMessage]:
        return self.listing.find(task_id)

    def earliest(self, queues: Iterable[str], limit: int) -> list[PendingMessage]:
        return self.listing.earliest(queues, limit)

    def claim_listing(
        self, queues: Sequence[str], ticket: str, holder: str, ttl_ms: int | None = None
    ) -> list[str]:
        """``ttl_ms``: LISTING_CLAIM_MS unless given."""
        if ttl_ms is None:
            return self.listing.claim_listing(queues, ticket, holder)
        return self.listing.claim_listing(queues, ticket, holder, ttl_ms)

    # -- counts.py

    def backlog(self) -> list[QueueBacklog]:
        return self.counts.backlog()

    def handover_counts(self, queues: Sequence[str]) -> dict[str, tuple[int, int]]:
        return self.counts.handover_counts(queues)

    def pending_counts(self, queues: Sequence[str]) -> dict[str, int]:
        return self.counts.pending_counts(queues)

    def stats(self, queue: str) -> dict[str, int]:
        return self.counts.stats(queue)

    def timeline(self, edges: list[float]) -> dict[str, list[int]]:
        return self.counts.timeline(edges)

    # -- admin.py

    def purge(self, queue: str, lists: Sequence[str] = ()) -> int:
        return self.admin.purge(queue, lists)

    def repair(self, keys: QueueKeys, key: bytes, seen_page: bytes | None) -> bool:
        return self.admin.repair(keys, key, seen_page)

    def page_entries(self, keys: QueueKeys) -> dict[bytes, tuple[bytes, int]]:
        return self.admin.page_entries(keys)

    # -- dead_letters.py

    def dead_letters(self, queue: str | None = None) -> list[DeadLetter]:
        return self.dead.list(queue)

    def add_dead_letter(self, queue: str, key: bytes, record: Record, reason: str) -> None:
        self.dead.add(queue, key, record, reason)

    def count_redelivery(self, queue: str, message_id: str, keep_seconds: int = 86400) -> int:
        return self.dead.count_redelivery(queue, message_id, keep_seconds)

    def resend_dead(self, queue: str, message_keys: Sequence[bytes]) -> int:
        return self.dead.resend(queue, message_keys)

    def drop_dead(self, queue: str, message_keys: Sequence[bytes]) -> int:
        return self.dead.drop(queue, message_keys)

    # -- flow.py

    def buckets(self, queue: str, log_entries: int = 0) -> list[BucketState]:
        return self.flow.buckets(queue, log_entries)

    def task_flows(self) -> list[TaskFlow]:
        return self.flow.task_flows()

    # -- ahead.py

    def ahead_mark(self, queue: str, entry: str) -> str | None:
        return self.ahead.mark(queue, entry)

    def ahead_marks(self, entries: Sequence[tuple[str, str]]) -> list[str | None]:
        return self.ahead.marks(entries)

    def write_ahead(
        self,
        queue: str,
        entry: str,
        read_mark: str | None,
        new_mark: str | None,
        occurrences: Sequence[Scheduled] = (),
        withdraw_after_ms: int | None = None,
        gone_kept_ms: int | None = None,
    ) -> AheadOutcome:
        return self.ahead.write(
            queue, entry, read_mark, new_mark, occurrences, withdraw_after_ms, gone_kept_ms
        )


def _handover_maker(
    handover: HandOver | Callable[[], HandOver] | None, client: redis.Redis, scripts: StoreScripts
) -> Callable[[], HandOver]:
    """What makes the store's hand-over on its first move: ``handover`` itself, the one
    given, or the same-Redis move (handover/same_redis.py is imported only then)."""
    if handover is None:

        def same_redis() -> HandOver:
            from ..handover.same_redis import SameRedisMove

            return SameRedisMove(client, scripts)

        return same_redis
    if callable(handover):
        return handover
    return lambda: handover


def import_facets() -> None:
    """Import now what the store otherwise imports on first use: a process about to run
    threads (a worker, before its pool forks) calls it, since a thread importing a module
    while a prefork pool forks can leave that module's import lock held in the child."""
    from .. import heartbeats  # noqa: F401
    from ..handover import claims, same_redis  # noqa: F401
    from . import admin, ahead, changes, counts, dead_letters, flow, listing, moves  # noqa: F401
