"""Messages that kept failing to reach a broker in another system (lua/handover.lua),
and messages a worker could not read off its queue (brokers/redis/consume.py).

They leave the schedule (or the queue) with the reason, so nothing is dropped silently;
an operator lists them, sends them again once the cause is fixed, or drops them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..layout.record import Record
from ..results import DeadLetter
from .state import StoreState


class DeadLetters:
    """The dead letters of one store, per queue."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def list(self, queue: str | None = None) -> list[DeadLetter]:
        """The dead letters of one queue or all, oldest first."""
        found: list[DeadLetter] = []
        for name in [queue] if queue else self.state.queues():
            for keys in self.state.keys.shards_of(name):
                with self.state.client.pipeline(transaction=True) as pipe:
                    pipe.hgetall(keys.dead)
                    pipe.hgetall(keys.dead_reasons)
                    records, reasons = pipe.execute()
                for key, raw in records.items():
                    dead_at, tries, reason = _dead_reason(reasons.get(key, b""))
                    record = Record.decode_or_raw(raw, keys.own_list, 0)
                    found.append(DeadLetter(name, key, record, dead_at, tries, reason))
        return sorted(found, key=lambda letter: letter.dead_at)

    def add(self, queue: str, key: bytes, record: Record, reason: str) -> None:
        """Keep a message that never entered the schedule as a dead letter of ``queue``
        (a message a worker could not read off the queue's list), with the reason; it is
        listed, resent and dropped like the others (resent, it goes to the record's
        destination). Counted in the queue's ``dead`` statistic, as handover.lua counts."""
        keys = self.state.keys.shard_of(queue, key)
        now_ms = self.state.server_time_ms()
        self.state.client.sadd(self.state.keys.queues, queue)  # where ``list`` looks
        with self.state.client.pipeline(transaction=not self.state.cluster) as pipe:
            pipe.hset(keys.dead, key, record.encode(keys.own_list))
            pipe.hset(keys.dead_reasons, key, f"{now_ms} 0 {reason}")
            pipe.hincrby(keys.stats, "dead", 1)
            pipe.execute()

    def count_redelivery(self, queue: str, message_id: str, keep_seconds: int = 86400) -> int:
        """Count one more delivery of a message of ``queue`` by a broker that keeps no count
        of its own (worker/poison.py bounds deliveries); how many so far. The count is kept
        ``keep_seconds`` after the last."""
        key = self.state.keys.for_queue(queue).deliveries(message_id)
        with self.state.client.pipeline(transaction=True) as pipe:
            pipe.incr(key)
            pipe.pexpire(key, keep_seconds * 1000)
            return int(pipe.execute()[0])

    def resend(self, queue: str, message_keys: Sequence[bytes]) -> int:
        """Schedule these dead letters of ``queue`` again, due now; how many. Each shard
        takes back those it holds (a duplicate's key does not tell its shard); one whose
        record a move cannot read stays a dead letter (lua/resend_dead.lua)."""
        if not message_keys:
            return 0
        script = self.state.scripts.resend_dead
        return sum(
            int(script(keys=keys.handover_keys(), args=[*keys.page_args(), *message_keys]))
            for keys in self.state.keys.shards_of(queue)
        )

    def drop(self, queue: str, message_keys: Sequence[bytes]) -> int:
        """Delete these dead letters of ``queue`` for good; how many."""
        if not message_keys:
            return 0
        dropped = 0
        for keys in self.state.keys.shards_of(queue):
            with self.state.client.pipeline(transaction=True) as pipe:
                pipe.hdel(keys.dead, *message_keys)
                pipe.hdel(keys.dead_reasons, *message_keys)
                dropped += int(pipe.execute()[0])
        return dropped


def _dead_reason(raw: bytes) -> tuple[float, int, str]:
    """``"<ms when> <tries> <reason>"`` (lua/handover.lua) as (seconds, tries, reason)."""
    when, _, rest = raw.decode("utf-8", "replace").partition(" ")
    tries, _, reason = rest.partition(" ")
    try:
        return int(when) / 1000, int(tries), reason
    except ValueError:
        return 0.0, 0, raw.decode("utf-8", "replace")
