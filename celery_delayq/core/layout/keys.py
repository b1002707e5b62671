"""The only place where celery-delayq forms Redis key names.

Layout, with ``P`` = kombu's ``global_keyprefix`` + ``delayq_key_prefix`` (default
``delayq``) and ``Q`` the kombu queue name::

    P:queues            SET    names of queues that have (or had) delayed messages
    P:queues:off-shard  SET    names of sharded queues that have (or had) messages outside
                                their task id's shard: keyed messages (their key's shard),
                                periodic occurrences written ahead (their entry's)
    P:movers            HASH   mover id -> JSON heartbeat (host, pid, kind, last seen, moved)
    P:periodic          HASH   periodic entry name -> "<version> <entry JSON>" (periodic/)
    P:periodic:versions STRING the last version given to a periodic entry (INCR)
    P:periodic:runs     HASH   periodic entry name -> "<occurrence ms> <started ms>" of its
                                last run, as versions before "last:<name>" wrote it
                                (still read when that is not written; periodic/history.py)
    P:periodic:counts   HASH   per periodic entry: "late:<name>" / "missed:<name>" ->
                                occurrences run late, or not run, after every beat was
                                down; "last:<name>" -> "<occurrence ms> <started ms>" of
                                the last run a worker started; "runs:<name>" /
                                "skipped:<name>" -> runs started, runs skipped as an
                                overlap, each counted once per occurrence ("counted:<name>"
                                / "skip-counted:<name>": the occurrence last counted);
                                "running:<name>" -> "<occurrence ms> <lease end ms>" of
                                the run going (overlap skip). One key: a run's start is
                                one script call (lua/run_start.lua), on a cluster too
    P:periodic:changes:{P:periodic}:<name> LIST the change log of periodic entry
                                <name>, newest first: one JSON record per change
                                (periodic/audit/), the last 100,
                                expiring 90 days after the last; its tag puts it in the
                                slot of P:periodic (when P holds a hash tag itself, the
                                key is P:periodic:changes:<name>, under that tag)
    P:wakeup            PUBSUB channel; a due time is published when a queue gets
                                a new earliest message, so sleeping movers wake early
    P:{Q}:msg           HASH   message key -> record (due time, destination list unless
                                it is the queue's own, payload); see record.py
    P:{Q}:pages         ZSET   page number -> page start (ms), pages in due order
    P:{Q}:p:<n>         ZSET   one page: message key -> due time (ms since the epoch), at
                                most PAGE_SIZE entries, so Redis keeps it as a compact
                                listpack (see lua/prelude.lua)
    P:{Q}:dup           HASH   "\x04<delay key>" -> "<since ms>:<message key>" of the
                                pending message holding a delay key (delay_keys.py);
                                task key -> sequence numbers of the task's extra
                                messages, as stores before P:{Q}:dup:by-task wrote it
    P:{Q}:dup:by-task   ZSET   "<len>:<task key><seq>" at score 0 for each extra message
                                of a task (record.extra_prefix): one task's are one
                                lexicographic range, so no call's work grows with them
    P:{Q}:stats         HASH   counters: scheduled, moved, cancelled, replaced, dropped,
                                refused (keyed messages), the move lateness
                                histogram (late_le_<ms>, late_sum_ms, late_count), and
                                page_seq/dup_seq for numbering pages and duplicates
    P:{Q}:inflight      ZSET   claimed message key -> lease deadline (ms), while a mover
                                hands it to another system (lua/handover.lua)
    P:{Q}:claims        HASH   claimed message key -> owner (one mover pass)
    P:{Q}:claimer       STRING the mover that claims from Q (or Q's shard) now; expires
                                soon after its last claim (one claimer at a time)
    P:{Q}:tries         HASH   message key -> failed hand-overs so far
    P:{Q}:dead          HASH   message key -> record of a message that kept failing
    P:{Q}:dead:why      HASH   message key -> "<ms when> <tries> <reason>"
    P:{Q}:deliveries:<M> STRING how many times a broker that keeps no count (a RabbitMQ
                                classic queue) delivered message M again; expires a day
                                after the last (worker/poison.py)
    P:{Q}:periodic      HASH   periodic entry name -> its mark: the version of the entry
                                and the last occurrence written ahead, or that it is
                                paused, or removed (a tombstone) (store/ahead.py)
    P:{Q}:periodic:ahead HASH  periodic entry name -> message keys of the occurrences
                                written ahead, each "<len>:<bytes>" (lua/write_ahead.lua)
    P:{Q}:periodic:gone ZSET   removed periodic entry name -> when its tombstone mark was
                                written (ms); a write ahead in the queue forgets those a
                                day old, with their marks (lua/write_ahead.lua)
    P:{Q}:fc:ready      ZSET   flow control: bucket -> when (us) the first of its waiting
                                messages may be released; a bucket is one rate- or
                                concurrency-limited task, or one limit key of it
    P:{Q}:fc:w:<B>      LIST   message keys waiting in bucket B, in due order
    P:{Q}:fc:s:<B>      HASH   bucket B's limits (spec), arrival times (t<i>), hold, count,
                                its time in the index (indexed), which is when it
                                expires
    P:{Q}:fc:r:<B>      ZSET   message key -> lease end (ms) of each of B's running slots:
                                taken at release, renewed by the worker holding the
                                task, given back as it ends (worker/flow/running_slots.py)
    P:{Q}:fc:log        LIST   "<us> <bucket>" per release, newest first, capped
                                (``delayq_release_log``); see lua/gates.lua
    P:{Q}:fc:index      ZSET   bucket -> when (ms) its state stops mattering, or up to
                                an hour later (+inf: paused): how the reader finds
                                buckets with nothing waiting (store/flow.py); members
                                past their time are dropped a few at a time by the
                                scripts that write it
    P:{Q}:fc:released   HASH   task -> its messages released by flow control, ever (a
                                count that never goes back: Prometheus)
    P:{Q}:fc:paused     STRING while it exists, the queue (shard) is paused: its moves
                                and hand-overs release nothing (ops/pause.py,
                                lua/move_due.lua, lua/claim_due.lua)
    P:{Q}:inspect:<T>   STRING the worker (node name) that lists Q's delayed messages in
                                its reply to the remote-control request with ticket T;
                                set once (NX), expires after a minute

One queue's keys share the ``{Q}`` hash tag, so each atomic script touches one
Redis Cluster slot (apart from the destination list, which kombu names). Page keys are
formed inside the Lua scripts from the page prefix, under the same tag.

Shards (``delayq_store_shards`` > 1): a queue's messages are spread over that many
independent copies of the per-queue keys, shard ``s`` under the tag ``{Q|s}`` (shard 0
keeps ``{Q}``, so a queue scheduled before sharding was turned on is still shard 0).

Queue names that cannot serve as a hash tag as they are (``tag_of``) are escaped, not
refused, so every Celery queue name stays usable: the empty name and one starting with
``}`` would give an empty tag (Redis then hashes each whole key: one queue's keys on
several cluster slots), and a name ending in ``|<digits>`` would share keys with a shard
of another queue (``a|1`` shard 0 and ``a`` shard 1). Such a name is spelled
``|<hex of its UTF-8>``; no name kept as it is starts with ``|``, so the two spellings
never meet. Every other name keeps the keys it always had. A
message's shard is fixed by its task id (``shard_of``), so cancel, reschedule and show
go to one shard of each queue, but in the queues listed in ``P:queues:off-shard``, to
every shard; on a Redis Cluster the shards of one busy queue hash to different slots,
and so to different nodes.
"""

from __future__ import annotations

import functools
import re
import zlib
from typing import Any, NamedTuple

#: Entries per page of due times; below Redis's default zset-max-listpack-entries (128),
#: so pages keep the compact encoding.
PAGE_SIZE = 120


#: A shard's suffix to a queue's tag: a name ending like it would share a shard's keys.
_SHARD_SUFFIX = re.compile(r"\|[0-9]+\Z")


def _hash_tag(key: str) -> str | None:
    """The hash tag Redis Cluster hashes ``key`` by, or None (it hashes the whole key)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    return key[start + 1 : end] if end > start + 1 else None


def tag_of(queue: str) -> str:
    """The hash-tag text of a queue's keys: its name, or ``|<hex of its UTF-8>`` for a
    name that would give an empty tag or share another queue's shard keys (see above)."""
    if queue and queue[0] not in "}|" and not _SHARD_SUFFIX.search(queue):
        return queue
    return "|" + queue.encode("utf-8", "surrogatepass").hex()


class QueueKeys(NamedTuple):
    """The keys holding one queue's delayed messages, and the queue's own kombu list."""

    queue: str
    messages: str
    pages: str
    duplicates: str
    stats: str
    page_prefix: str
    own_list: str  # the destination most records have (priority lists are named in them)
    tagged: str  # the start of every key of this queue shard: P:{Q} or P:{Q|s}
    shard: int = 0
    shards: int = 1  # how many shards the queue has

    @property
    def label(self) -> str:
        """The queue's name, with the shard when the queue is sharded (for reports)."""
        return f"{self.queue} shard {self.shard}" if self.shards > 1 else self.queue

    def as_list(self) -> list[str]:
        """The keys in the order every per-queue script expects them as KEYS."""
        return [self.messages, self.pages, self.duplicates, self.stats]

    @property
    def by_task(self) -> str:
        """The index of the tasks' extra messages (formed in lua/prelude.lua as well)."""
        return f"{self.duplicates}:by-task"

    @property
    def inflight(self) -> str:
        return f"{self.tagged}:inflight"

    @property
    def dead(self) -> str:
        return f"{self.tagged}:dead"

    @property
    def periodic_marks(self) -> str:
        return f"{self.tagged}:periodic"

    @property
    def periodic_ahead(self) -> str:
        return f"{self.tagged}:periodic:ahead"

    @property
    def periodic_gone(self) -> str:
        return f"{self.tagged}:periodic:gone"

    @property
    def dead_reasons(self) -> str:
        return f"{self.tagged}:dead:why"

    def deliveries(self, message_id: str) -> str:
        return f"{self.tagged}:deliveries:{message_id}"

    @property
    def gates(self) -> str:
        """The start of every flow-control key of this queue shard (lua/gates.lua)."""
        return f"{self.tagged}:fc:"

    @property
    def paused(self) -> str:
        """While it exists, this queue shard releases nothing (lua/move_due.lua,
        lua/claim_due.lua)."""
        return f"{self.gates}paused"

    def gate(self, kind: str, bucket: str) -> str:
        """One bucket's waiting list (``w``), state (``s``) or running slots (``r``)."""
        return f"{self.gates}{kind}:{bucket}"

    @property
    def gate_ready(self) -> str:
        """Flow control's ready buckets (lua/gates.lua): every script that takes due
        messages gets it as its last key."""
        return f"{self.gates}ready"

    @property
    def gate_log(self) -> str:
        """Flow control's release log (lua/gates.lua)."""
        return f"{self.gates}log"

    @property
    def gate_index(self) -> str:
        """Flow control's bucket index: bucket -> when (ms) its state stops mattering,
        or a little later (lua/gates.lua)."""
        return f"{self.gates}index"

    @property
    def gate_released(self) -> str:
        """Flow control's released count per task, never going back (lua/gates.lua)."""
        return f"{self.gates}released"

    def slot_take_keys(self, bucket: str) -> list[str]:
        """KEYS of ``lua/slot_take.lua``: one bucket's running slots and state, and the
        queue shard's bucket index."""
        return [self.gate("r", bucket), self.gate("s", bucket), self.gate_index]

    def slot_keys(self, bucket: str) -> list[str]:
        """KEYS of ``lua/slot_end.lua``: one bucket's running slots, state, waiting list,
        and the queue shard's ready buckets."""
        return [*(self.gate(kind, bucket) for kind in "rsw"), self.gate_ready]

    def move_keys(self) -> list[str]:
        """KEYS[1..7] of ``lua/move_due.lua``: an unreadable record goes to the dead
        letters, a flow-controlled one to its bucket (lua/gates.lua)."""
        return [*self.as_list(), self.dead, self.dead_reasons, self.gate_ready]

    def handover_keys(self) -> list[str]:
        """KEYS[1..11] of the claim -> publish -> ack scripts (lua/handover.lua); the
        last, the ready buckets, is used by the claim alone (lua/claim_due.lua)."""
        claims, tries = f"{self.tagged}:claims", f"{self.tagged}:tries"
        claimer = f"{self.tagged}:claimer"
        return [
            *self.as_list(),
            *(self.inflight, claims, tries, self.dead, self.dead_reasons, claimer),
            self.gate_ready,
        ]

    def page_args(self) -> list[Any]:
        """ARGV[1] and ARGV[2] of every per-queue script (lua/prelude.lua)."""
        return [self.page_prefix, PAGE_SIZE]

    def page(self, number: bytes | str) -> str:
        number = number.decode() if isinstance(number, bytes) else number
        return f"{self.page_prefix}{number}"


class KeySpace(NamedTuple):
    """Key names for one store; ``global_keyprefix`` is applied here and nowhere else."""

    global_keyprefix: str = ""
    key_prefix: str = "delayq"
    shards: int = 1  # how many shards each queue's messages are spread over

    @property
    def base(self) -> str:
        return f"{self.global_keyprefix}{self.key_prefix}"

    @property
    def queues(self) -> str:
        return self._named("queues")

    @property
    def off_shard_queues(self) -> str:
        return self._named("queues:off-shard")

    @property
    def movers(self) -> str:
        return self._named("movers")

    @property
    def periodic_entries(self) -> str:
        return self._named("periodic")

    @property
    def periodic_versions(self) -> str:
        return self._named("periodic:versions")

    @property
    def periodic_runs(self) -> str:
        return self._named("periodic:runs")

    @property
    def periodic_counts(self) -> str:
        return self._named("periodic:counts")

    def periodic_changes(self, name: str) -> str:
        """The change log of the periodic entry ``name``, under the prefix (an ACL's key
        pattern holds it) and in the slot of ``periodic_entries`` wherever a key can be
        (``changes_beside_entries``)."""
        entries = self.periodic_entries
        if _hash_tag(entries) is not None or not self.changes_beside_entries:
            return f"{entries}:changes:{name}"
        return f"{entries}:changes:{{{entries}}}:{name}"

    @property
    def changes_beside_entries(self) -> bool:
        """Whether the change logs share the slot of ``periodic_entries``, so that a
        change and its record are one script call: not when the prefix holds a brace
        outside a hash tag (no key under that prefix hashes as the whole key does)."""
        entries = self.periodic_entries
        return _hash_tag(entries) is not None or not {"{", "}"} & set(entries)

    @property
    def wakeup_channel(self) -> str:
        return self._named("wakeup")

    def _named(self, name: str) -> str:
        return f"{self.base}:{name}"

    def shards_of(self, queue: str) -> list[QueueKeys]:
        """The keys of every shard of one queue, shard 0 first."""
        return [self.for_queue(queue, shard) for shard in range(self.shards)]

    def shard_of(self, queue: str, message_key: bytes) -> QueueKeys:
        """The keys of the one shard that holds a message: by its message key (a task's
        packed id, record.task_key), so every process finds a task's shard alike."""
        shard = zlib.crc32(message_key) % self.shards if self.shards > 1 else 0
        return self.for_queue(queue, shard)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 - KeySpaces are few and live long
    def for_queue(self, queue: str, shard: int = 0) -> QueueKeys:
        """The keys of one shard of a queue (shard 0: the whole queue when unsharded);
        cached: every schedule asks."""
        tag = tag_of(queue)
        tagged = self._tagged(tag if shard == 0 else f"{tag}|{shard}")
        return QueueKeys(
            queue=queue,
            messages=f"{tagged}:msg",
            pages=f"{tagged}:pages",
            duplicates=f"{tagged}:dup",
            stats=f"{tagged}:stats",
            page_prefix=f"{tagged}:p:",
            own_list=self.destination(queue),
            tagged=tagged,
            shard=shard,
            shards=self.shards,
        )

    def inspect_claim(self, queue: str, ticket: str) -> str:
        """Who lists ``queue``'s delayed messages in the replies to one request."""
        return f"{self._tagged(tag_of(queue))}:inspect:{ticket}"

    def _tagged(self, tag: str) -> str:
        """The start of every key of one queue shard, with its hash tag (``tag_of``)."""
        return f"{self.base}:{{{tag}}}"

    def destination(self, kombu_list: str) -> str:
        """The real key of a kombu queue list (kombu prefixes it the same way)."""
        return f"{self.global_keyprefix}{kombu_list}"
