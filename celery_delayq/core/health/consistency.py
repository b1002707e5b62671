"""The store's consistency scan (``doctor``): records, pages of due times and duplicate
listings must agree; what is safe to repair is repaired, each repair re-checked
atomically in Redis."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..layout.keys import QueueKeys
from ..layout.record import Record, duplicate_key, is_duplicate, is_key_index, split_extra
from ..redis_replies import hash_reply, list_reply
from ..store import DelayedStore
from .health_checks import OK, WARN, Finding

#: Records read per HSCAN round trip.
SCAN_CHUNK = 1000


def consistency_findings(store: DelayedStore, repair: bool = False) -> list[Finding]:
    """Cross-check each queue's records, pages of due times and duplicate listings;
    repair what is safe.

    Repairs, each re-checked atomically in Redis so running movers are never undone: a
    page entry without a record is dropped (nothing to deliver); a record without a page
    entry (and not waiting in a flow-control bucket, where a due limited message waits
    out of the schedule by design), or with one at another time, is scheduled at the due
    time in the record; a
    duplicate's listing is made to match its record; an unreadable record goes to the dead
    letters with the reason (``celery delayq dead`` lists them).
    """
    findings = []
    for queue in store.queues():
        for shard in store.keys.shards_of(queue):
            problems = _shard_consistency(store, shard, repair)
            if problems:
                verb = "repaired" if repair else "found"
                fix = "" if repair else "run `celery delayq doctor --repair`"
                findings.append(
                    Finding(f"store {shard.label}", WARN, f"{verb}: {'; '.join(problems)}", fix)
                )
    if not findings:
        findings.append(Finding("store", OK, "records, schedule and duplicate listings agree"))
    return findings


@dataclass
class QueueScan:
    """What one queue's scan found: the keys each kind of disagreement concerns."""

    entries: dict[bytes, tuple[bytes, int]]  # page entries: key -> (page, due ms)
    ghosts: list[bytes] = field(default_factory=list)  # scheduled without a record
    unscheduled: list[bytes] = field(default_factory=list)  # records without a page entry
    mistimed: list[bytes] = field(default_factory=list)  # page entry at another due time
    misfiled: set[bytes] = field(default_factory=set)  # duplicate listings out of date
    unreadable: list[bytes] = field(default_factory=list)  # records outside the grammar

    def problems(self) -> list[str]:
        counts = (
            (len(self.ghosts), "scheduled without a record"),
            (len(self.unscheduled), "records without a schedule entry"),
            (len(self.mistimed), "scheduled at another time than their record says"),
            (len(self.misfiled), "duplicate listings out of date"),
            (len(self.unreadable), "unreadable records (to the dead letters on repair)"),
        )
        return [f"{count} {what}" for count, what in counts if count]

    def to_repair(self) -> set[bytes]:
        return {*self.ghosts, *self.unscheduled, *self.mistimed, *self.misfiled, *self.unreadable}


def _shard_consistency(store: DelayedStore, keys: QueueKeys, repair: bool) -> list[str]:
    scan = scan_shard(store, keys)
    if repair:
        for key in scan.to_repair():
            store.repair(keys, key, scan.entries.get(key, (None, 0))[0])
    return scan.problems()


def scan_shard(store: DelayedStore, keys: QueueKeys) -> QueueScan:
    """Compare one queue shard's records with its page entries and duplicate listings."""
    scan = QueueScan(store.page_entries(keys))
    records: dict[bytes, int] = {}
    for key, raw in store.client.hscan_iter(keys.messages, count=SCAN_CHUNK):
        try:
            records[key] = Record.decode(raw, keys.own_list).due_ms
        except ValueError:
            scan.unreadable.append(key)
    unreadable = set(scan.unreadable)
    scan.ghosts = [key for key in scan.entries if key not in records and key not in unreadable]
    waiting = _waiting(store, keys)
    scan.unscheduled = [key for key in records if key not in scan.entries and key not in waiting]
    scan.mistimed = [
        key for key, due in records.items() if scan.entries.get(key, (b"", due))[1] != due
    ]
    listings = hash_reply(store.client.hgetall(keys.duplicates))
    listed = {
        duplicate_key(task, seq)
        for task, seqs in listings.items()
        if not is_key_index(task)  # a delay key's holder, not a list of duplicates
        for seq in seqs.split()
    }
    extras = (split_extra(member) for member in _by_task(store, keys))
    listed.update(duplicate_key(*extra) for extra in extras if extra is not None)
    scan.misfiled = listed ^ {key for key in records if is_duplicate(key)}
    return scan


def _waiting(store: DelayedStore, keys: QueueKeys) -> set[bytes]:
    """The message keys waiting in the shard's flow-control buckets (lua/gates.lua: each
    bucket with messages waiting is in the ready set), read SCAN_CHUNK at a time."""
    client = store.client
    waiting: set[bytes] = set()
    for bucket, _ in client.zscan_iter(keys.gate_ready, count=SCAN_CHUNK):
        name = f"{keys.gates}w:".encode() + bytes(bucket)
        if client.type(name) != b"list":
            continue  # crafted: no message waits there (gates.lua)
        for start in range(0, client.llen(name), SCAN_CHUNK):
            waiting.update(list_reply(client.lrange(name, start, start + SCAN_CHUNK - 1)))
    return waiting


def _by_task(store: DelayedStore, keys: QueueKeys) -> list[bytes]:
    """Every member of the shard's index of extra messages (``P:{Q}:dup:by-task``)."""
    return [member for member, _ in store.client.zscan_iter(keys.by_task, count=SCAN_CHUNK)]
