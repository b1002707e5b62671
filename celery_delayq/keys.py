"""The only place where celery-delayq forms Redis key names.

Layout, with ``P`` = kombu's ``global_keyprefix`` + ``delayq_key_prefix`` (default
``delayq``) and ``Q`` the kombu queue name::

    P:queues            SET    names of queues that have (or had) delayed messages
    P:movers            HASH   mover id -> JSON heartbeat (host, pid, kind, last seen, moved)
    P:wakeup            PUBSUB channel; a due time is published when a queue gets
                                a new earliest message, so sleeping movers wake early
    P:{Q}:due           ZSET   message id -> due time (ms since the epoch)
    P:{Q}:msg           HASH   message id -> record (destination list, task id, payload)
    P:{Q}:ids           HASH   Celery task id -> space-separated message ids
    P:{Q}:stats         HASH   counters: scheduled, moved, cancelled, and the move
                                lateness histogram (late_le_<ms>, late_sum_ms, late_count)

One queue's keys share the ``{Q}`` hash tag, so each atomic script touches one
Redis Cluster slot (apart from the destination list, which kombu names).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QueueKeys:
    """The keys holding one queue's delayed messages."""

    queue: str
    due: str
    messages: str
    task_index: str
    stats: str

    def as_list(self) -> list[str]:
        """The keys in the order every per-queue script expects them as KEYS."""
        return [self.due, self.messages, self.task_index, self.stats]


@dataclass(frozen=True)
class KeySpace:
    """Key names for one store; ``global_keyprefix`` is applied here and nowhere else."""

    global_keyprefix: str = ""
    key_prefix: str = "delayq"

    @property
    def base(self) -> str:
        return f"{self.global_keyprefix}{self.key_prefix}"

    @property
    def queues(self) -> str:
        return f"{self.base}:queues"

    @property
    def movers(self) -> str:
        return f"{self.base}:movers"

    @property
    def wakeup_channel(self) -> str:
        return f"{self.base}:wakeup"

    def for_queue(self, queue: str) -> QueueKeys:
        tagged = f"{self.base}:{{{queue}}}"
        return QueueKeys(
            queue=queue,
            due=f"{tagged}:due",
            messages=f"{tagged}:msg",
            task_index=f"{tagged}:ids",
            stats=f"{tagged}:stats",
        )

    def destination(self, kombu_list: str) -> str:
        """The real key of a kombu queue list (kombu prefixes it the same way)."""
        return f"{self.global_keyprefix}{kombu_list}"
