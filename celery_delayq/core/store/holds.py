"""Holds on flow control's releases: one bucket paused, throttled or resumed
(lua/gate_hold.lua), and a whole queue paused (its mark, which lua/move_due.lua and
lua/claim_due.lua look for first). ops/pause.py decides where a hold goes; this writes it
there."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..layout.gates import bucket_shard_key
from ..lua import ScriptCall, run_pipelined
from .state import StoreState

#: What gate_hold.lua does to a bucket's hold.
HOLD_ACTIONS = ("pause", "throttle", "resume")


class BucketHold(NamedTuple):
    """A bucket's hold after a change, over the queues it was changed in."""

    paused: bool
    until_us: int | None  # a throttle's end (Redis clock, us), while it lasts
    waiting: int  # messages waiting in the bucket, in all those queues


class Holds:
    """Writes holds; each bucket's in its own shard of each queue (a bucket's messages
    wait in one shard: layout/gates.py shard_key)."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def hold_bucket(
        self, queues: Iterable[str], bucket: str, action: str, micros: int = 0
    ) -> BucketHold:
        """``action`` (``HOLD_ACTIONS``) on ``bucket`` in each of ``queues``, one atomic
        call per queue, all in one round trip (per node, on a cluster)."""
        if action not in HOLD_ACTIONS:
            raise ValueError(f"no hold action {action!r}: one of {', '.join(HOLD_ACTIONS)}")
        keys, script = self.state.keys, self.state.scripts.gate_hold
        by, name = bucket_shard_key(bucket), bucket.encode("utf-8", "surrogatepass")
        calls: list[ScriptCall] = []
        for queue in dict.fromkeys(queues):
            shard = keys.shard_of(queue, by)
            args = [*shard.page_args(), name, action, micros, keys.wakeup_channel]
            calls.append((script, shard.move_keys(), args))
        replies = run_pipelined(self.state.client, calls)
        holds = {hold.decode() if isinstance(hold, bytes) else str(hold) for hold, _ in replies}
        ends = [int(hold) for hold in holds if hold not in ("", "paused")]
        return BucketHold(
            "paused" in holds, max(ends, default=None), sum(int(n) for _, n in replies)
        )

    def pause_queue(self, queue: str) -> None:
        """Mark every shard of ``queue`` paused: its moves release nothing."""
        with self.state.client.pipeline(transaction=False) as pipe:
            for shard in self.state.keys.shards_of(queue):
                pipe.set(shard.paused, 1)
            pipe.execute()

    def resume_queue(self, queue: str) -> bool:
        """Unmark ``queue`` and wake the movers; whether it was paused."""
        with self.state.client.pipeline(transaction=False) as pipe:
            for shard in self.state.keys.shards_of(queue):
                pipe.delete(shard.paused)
            was_paused = any(int(n) for n in pipe.execute())
        self.state.client.publish(self.state.keys.wakeup_channel, self.state.server_time_ms())
        return was_paused

    def queue_paused(self, queue: str) -> bool:
        """Whether ``queue`` is paused (in any of its shards)."""
        names = [shard.paused for shard in self.state.keys.shards_of(queue)]
        return any(int(self.state.client.exists(name)) for name in names)
