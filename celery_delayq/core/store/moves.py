"""Moving due messages out of the store, through its hand-over (handover/), and the
wake-ups that tell movers a message became its queue's earliest."""

from __future__ import annotations

import logging
import random

import redis
from redis.client import PubSub

from ..layout.keys import QueueKeys
from ..results import MoveResult
from ..topology import reread_layout
from .state import StoreState

logger = logging.getLogger(__name__)


class Moves:
    """Delivers due messages in bounded batches, each shard's sized by the time its last
    ones took (batching.ShardBatches)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state
        #: Queues looked at for messages outside their task's shard (_list_off_shard).
        self._off_shard_checked: set[str] = set()

    def move_due(self, queue: str) -> MoveResult:
        """Deliver at most one batch of this queue's due messages from each shard."""
        results = [self._deliver(shard) for shard in self.state.keys.shards_of(queue)]
        return MoveResult.merged(results, self._server_ms)

    def move_all_due(self) -> MoveResult:
        """Deliver everything due in every queue, one bounded batch per call.

        Queues take turns, so a huge backlog in one does not hold up another, and a
        queue whose move fails (its destination key is not a list, say) is logged and
        skipped: its messages stay pending, and the other queues are still moved.
        """
        shards: dict[QueueKeys, MoveResult] = {}  # each shard's calls so far, as one
        pipelined: list[MoveResult] = []
        queues = self.state.queues()
        self._list_off_shard(queues)
        active = [shard for queue in queues for shard in self._shards_in_turn(queue)]
        try:
            while active:
                results = [(shard, self._try_move(shard)) for shard in active]
                for shard, result in results:
                    if result is not None:
                        earlier = shards.get(shard)
                        shards[shard] = result if earlier is None else earlier.then(result)
                active = [shard for shard, result in results if result and result.more_due]
        finally:
            # Only a shard whose move failed can leave a pipelined batch (hand-overs
            # that pipeline, handover/claims.py); nothing stays in flight after a pass.
            pipelined = list(self.state.handover.settle_pipelined())
        return MoveResult.merged([*shards.values(), *pipelined], self._server_ms)

    def _server_ms(self) -> int:
        """The Redis server's time as a move would see it (with the hand-over's lead)."""
        return self.state.server_time_ms() + self.state.handover.ahead_ms

    def _list_off_shard(self, queues: list[str]) -> None:
        """List in ``P:queues:off-shard`` each sharded queue holding keyed messages or
        periodic occurrences written ahead that a version before that set stored (its
        delay-key index or its occurrences, in any shard), once per process: cancel,
        reschedule and show by task id then ask every shard of it. A shard that cannot
        be read now is looked at again on the next pass."""
        if self.state.keys.shards == 1:
            return
        for queue in queues:
            if queue in self._off_shard_checked:
                continue
            try:
                if self._holds_off_shard(queue):
                    self.state.client.sadd(self.state.keys.off_shard_queues, queue)
            except redis.RedisError:
                continue
            self._off_shard_checked.add(queue)

    def _holds_off_shard(self, queue: str) -> bool:
        with self.state.client.pipeline(transaction=False) as pipe:
            for keys in self.state.keys.shards_of(queue):
                pipe.hlen(keys.duplicates)  # delay-key holders (or old duplicate lists)
                pipe.exists(keys.periodic_ahead)
            return any(int(found) for found in pipe.execute())

    def _shards_in_turn(self, queue: str) -> list[QueueKeys]:
        """A queue's shards, starting at a random one: movers running side by side
        start on different shards instead of all claiming from the same one first."""
        shards = self.state.keys.shards_of(queue)
        start = random.randrange(len(shards))
        return shards[start:] + shards[:start]

    def _try_move(self, shard: QueueKeys) -> MoveResult | None:
        try:
            return self._deliver(shard, more_calls=True)
        except redis.ResponseError as exc:
            logger.warning("celery-delayq: cannot move queue %r: %s", shard.label, exc)
            return None

    def _deliver(self, shard: QueueKeys, more_calls: bool = False) -> MoveResult:
        """One batch, sized by the time the calls before it took (batching.py)."""
        sizer = self.state.batch.of(shard)
        limit = sizer.size
        result = self.state.handover.deliver_due(shard, limit, more_calls)
        used = result.batch_used
        sizer.observe(
            limit, result.moved + result.missing if used is None else used, result.call_seconds
        )
        return result

    def wakeup_subscription(self) -> PubSub:
        """A subscription to the movers' wake-up channel. On a cluster it goes to a node
        the client's layout names; after a failover that may be the dead master, which
        a subscription (unlike a command) does not correct: the layout is read again."""
        try:
            return self._subscribe()
        except redis.ConnectionError:
            if not self.state.cluster:
                raise
            reread_layout(self.state.client)
            return self._subscribe()

    def _subscribe(self) -> PubSub:
        pubsub = self.state.client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.state.keys.wakeup_channel)
        return pubsub
