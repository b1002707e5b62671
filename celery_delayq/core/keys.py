"""The only place where celery-delayq forms Redis key names.

Layout, with ``P`` = kombu's ``global_keyprefix`` + ``delayq_key_prefix`` (default
``delayq``) and ``Q`` the kombu queue name::

    P:queues            SET    names of queues that have (or had) delayed messages
    P:movers            HASH   mover id -> JSON heartbeat (host, pid, kind, last seen, moved)
    P:wakeup            PUBSUB channel; a due time is published when a queue gets
                                a new earliest message, so sleeping movers wake early
    P:{Q}:msg           HASH   message key -> record (due time, destination list unless
                                it is the queue's own, payload); see record.py
    P:{Q}:pages         ZSET   page number -> page start (ms), pages in due order
    P:{Q}:p:<n>         ZSET   one page: message key -> due time (ms since the epoch), at
                                most PAGE_SIZE entries, so Redis keeps it as a compact
                                listpack (see lua/prelude.lua)
    P:{Q}:dup           HASH   task key -> sequence numbers of the task's extra messages
    P:{Q}:stats         HASH   counters: scheduled, moved, cancelled, the move lateness
                                histogram (late_le_<ms>, late_sum_ms, late_count), and
                                page_seq/dup_seq for numbering pages and duplicates
    P:{Q}:inflight      ZSET   claimed message key -> lease deadline (ms), while a mover
                                hands it to another system (lua/handover.lua)
    P:{Q}:claims        HASH   claimed message key -> owner (one mover pass)
    P:{Q}:tries         HASH   message key -> failed hand-overs so far
    P:{Q}:dead          HASH   message key -> record of a message that kept failing
    P:{Q}:dead:why      HASH   message key -> "<ms when> <tries> <reason>"
    P:{Q}:inspect:<T>   STRING the worker (node name) that lists Q's delayed messages in
                                its reply to the remote-control request with ticket T;
                                set once (NX), expires after a minute

One queue's keys share the ``{Q}`` hash tag, so each atomic script touches one
Redis Cluster slot (apart from the destination list, which kombu names). Page keys are
formed inside the Lua scripts from the page prefix, under the same tag.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: Entries per page of due times; below Redis's default zset-max-listpack-entries (128),
#: so pages keep the compact encoding.
PAGE_SIZE = 120


@dataclass(frozen=True)
class QueueKeys:
    """The keys holding one queue's delayed messages, and the queue's own kombu list."""

    queue: str
    messages: str
    pages: str
    duplicates: str
    stats: str
    page_prefix: str
    own_list: str  # the destination most records have (priority lists are named in them)
    tagged: str  # the start of every key of this queue: P:{Q}

    def as_list(self) -> list[str]:
        """The keys in the order every per-queue script expects them as KEYS."""
        return [self.messages, self.pages, self.duplicates, self.stats]

    @property
    def inflight(self) -> str:
        return f"{self.tagged}:inflight"

    @property
    def dead(self) -> str:
        return f"{self.tagged}:dead"

    @property
    def dead_reasons(self) -> str:
        return f"{self.tagged}:dead:why"

    def handover_keys(self) -> list[str]:
        """KEYS[1..9] of the claim -> publish -> ack scripts (lua/handover.lua)."""
        claims, tries = f"{self.tagged}:claims", f"{self.tagged}:tries"
        return [*self.as_list(), self.inflight, claims, tries, self.dead, self.dead_reasons]

    def page_args(self) -> list[Any]:
        """ARGV[1] and ARGV[2] of every per-queue script (lua/prelude.lua)."""
        return [self.page_prefix, PAGE_SIZE]

    def page(self, number: bytes | str) -> str:
        number = number.decode() if isinstance(number, bytes) else number
        return f"{self.page_prefix}{number}"


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
        return self._named("queues")

    @property
    def movers(self) -> str:
        return self._named("movers")

    @property
    def wakeup_channel(self) -> str:
        return self._named("wakeup")

    def _named(self, name: str) -> str:
        return f"{self.base}:{name}"

    def for_queue(self, queue: str) -> QueueKeys:
        tagged = self._tagged(queue)
        return QueueKeys(
            queue=queue,
            messages=f"{tagged}:msg",
            pages=f"{tagged}:pages",
            duplicates=f"{tagged}:dup",
            stats=f"{tagged}:stats",
            page_prefix=f"{tagged}:p:",
            own_list=self.destination(queue),
            tagged=tagged,
        )

    def inspect_claim(self, queue: str, ticket: str) -> str:
        """Who lists ``queue``'s delayed messages in the replies to one request."""
        return f"{self._tagged(queue)}:inspect:{ticket}"

    def _tagged(self, queue: str) -> str:
        """The start of every key of one queue, with the queue's hash tag."""
        return f"{self.base}:{{{queue}}}"

    def destination(self, kombu_list: str) -> str:
        """The real key of a kombu queue list (kombu prefixes it the same way)."""
        return f"{self.global_keyprefix}{kombu_list}"
