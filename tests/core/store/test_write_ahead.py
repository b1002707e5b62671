"""Periodic occurrences written ahead under a compare-and-set of the entry's mark
(core/store/ahead.py, lua/write_ahead.lua), against a real Redis: of any number of
writers, one writes each occurrence; a change withdraws what was written ahead."""

from __future__ import annotations

import threading

import pytest
import redis

from celery_delayq.core.layout.keys import KeySpace
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.periodic.records import Mark

pytestmark = pytest.mark.integration

QUEUE = "periodic-q"
ENTRY = "nightly report"
SECOND = 1_000


def make_store(client: redis.Redis, shards: int = 1) -> DelayedStore:
    return DelayedStore(client, KeySpace("", "delayq", shards))


def occurrence(due_ms: int, version: int = 1) -> Scheduled:
    task_id = f"{ENTRY}@{version}:{due_ms}"
    return Scheduled(
        queue=QUEUE,
        message_id=task_id,
        task_id=task_id,
        due_ms=due_ms,
        destination=QUEUE,
        payload=b'{"occurrence": %d, "version": %d}' % (due_ms, version),
    )


def pending_dues(store: DelayedStore) -> list[int]:
    return sorted(message.due_ms for message in store.pending(queue=QUEUE, limit=10_000))


def test_a_writer_holding_a_stale_mark_writes_nothing(redis_client):
    store = make_store(redis_client)
    base = store.server_time_ms() + 3_600 * SECOND
    first = store.write_ahead(QUEUE, ENTRY, None, f"1:{base}", [occurrence(base)])
    assert (first.written, first.stored, first.mark) == (True, 1, f"1:{base}")

    # a second beat read "no mark" too, and would write the same occurrence
    second = store.write_ahead(QUEUE, ENTRY, None, f"1:{base}", [occurrence(base)])
    assert (second.written, second.mark) == (False, f"1:{base}")
    assert pending_dues(store) == [base]
    assert store.ahead_mark(QUEUE, ENTRY) == f"1:{base}"


@pytest.mark.parametrize("shards", [1, 3])
def test_racing_writers_write_each_occurrence_once(redis_server, redis_client, shards):
    """Four threads, each with its own connection, advance one entry's mark as beats do:
    read the mark, write the occurrence after it, retry from the mark found."""
    clients = [redis.Redis.from_url(redis_server.url) for _ in range(4)]
    base = make_store(clients[0], shards).server_time_ms() + 3_600 * SECOND
    last = base + 299 * SECOND  # 300 occurrences, a second apart
    wins: list[int] = []

    def beat(client: redis.Redis) -> None:
        store = make_store(client, shards)
        mark = store.ahead_mark(QUEUE, ENTRY)
        while True:
            up_to = int(mark) if mark else base - SECOND
            if up_to >= last:
                return
            due = up_to + SECOND
            outcome = store.write_ahead(QUEUE, ENTRY, mark, str(due), [occurrence(due)])
            if outcome.written:
                wins.append(due)
            mark = outcome.mark

    threads = [threading.Thread(target=beat, args=(client,)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    expected = [base + n * SECOND for n in range(300)]
    assert sorted(wins) == expected
    assert pending_dues(make_store(clients[0], shards)) == expected
    for client in clients:
        client.close()


def test_a_change_withdraws_what_was_written_ahead_and_writes_the_new(redis_client):
    store = make_store(redis_client)
    base = store.server_time_ms() + 3_600 * SECOND
    old = [occurrence(base + n * 60 * SECOND) for n in range(3)]
    store.write_ahead(QUEUE, ENTRY, None, "1", old)

    new = [occurrence(base + n * 30 * SECOND, version=2) for n in range(1, 3)]
    changed = store.write_ahead(QUEUE, ENTRY, "1", "2", new, withdraw_after_ms=0)
    assert (changed.written, changed.withdrawn, changed.stored) == (True, 3, 2)
    listed = store.pending(queue=QUEUE, limit=10)
    assert sorted(m.task_id for m in listed) == sorted(m.task_id for m in new)
    assert int(redis_client.hget(store.keys.for_queue(QUEUE).stats, "cancelled")) == 3

    paused = store.write_ahead(QUEUE, ENTRY, "2", "2 paused", [], withdraw_after_ms=0)
    assert (paused.withdrawn, pending_dues(store)) == (2, [])
    removed = store.write_ahead(QUEUE, ENTRY, "2 paused", None, [], withdraw_after_ms=0)
    assert removed.written and store.ahead_mark(QUEUE, ENTRY) is None
    keys = store.keys.for_queue(QUEUE)
    assert not redis_client.exists(keys.periodic_marks, keys.periodic_ahead)


def test_occurrences_are_moved_when_due_and_then_no_longer_withdrawn(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    due, later = occurrence(now - SECOND), occurrence(now + 3_600 * SECOND)
    store.write_ahead(QUEUE, ENTRY, None, "1", [due, later])

    assert store.move_all_due().moved == 1
    assert redis_client.llen(QUEUE) == 1
    changed = store.write_ahead(QUEUE, ENTRY, "1", "2", [], withdraw_after_ms=0)
    assert changed.withdrawn == 1  # the one still pending; the moved one ran
    assert redis_client.llen(QUEUE) == 1


@pytest.mark.promise("crafted-input-stops-nothing")
def test_crafted_bytes_in_the_ahead_list_stop_nothing(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue(QUEUE)
    base = store.server_time_ms() + 3_600 * SECOND
    for crafted in [b"garbage", b"999999999999999999:x", b"5:ab", b"\xff" * 40, b"3:abc7:"]:
        redis_client.hset(keys.periodic_ahead, ENTRY, crafted)
        redis_client.hset(keys.periodic_marks, ENTRY, "m")
        outcome = store.write_ahead(QUEUE, ENTRY, "m", "m", [occurrence(base)], withdraw_after_ms=0)
        assert outcome.written
        store.write_ahead(QUEUE, ENTRY, "m", "m", [], withdraw_after_ms=0)  # withdraws it again
    assert pending_dues(store) == []


def test_an_occurrence_for_another_queue_is_refused_before_anything_is_written(redis_client):
    store = make_store(redis_client)
    other = occurrence(store.server_time_ms())
    other = other._replace(queue="elsewhere")
    with pytest.raises(ValueError, match="elsewhere"):
        store.write_ahead(QUEUE, ENTRY, None, "1", [other])
    assert store.ahead_mark(QUEUE, ENTRY) is None


def test_entries_on_a_redis_cluster_write_once_each_in_one_slot(
    redis_cluster, cluster_store_url
) -> None:
    """Entries spread over the shards of a queue on 3 masters: each call touches one
    slot (else Redis refuses it: CROSSSLOT), and a stale mark still writes nothing."""
    client = redis_cluster.client()
    store = DelayedStore(client, KeySpace("", "delayq", 8), cluster=True)
    base = store.server_time_ms() + 3_600 * SECOND
    names = [f"entry {n}" for n in range(12)]
    for name in names:
        store.write_ahead(QUEUE, name, None, "1", [occurrence(base)])
        assert not store.write_ahead(QUEUE, name, None, "1", [occurrence(base)]).written
    shards = {store.keys.shard_of(QUEUE, name.encode()).shard for name in names}
    assert len(shards) > 1
    assert len(store.pending(queue=QUEUE, limit=100)) == len(names)
    client.close()


@pytest.mark.promise("periodic-versions-forward")
def test_a_mark_of_an_older_version_is_refused_as_stale(redis_client):
    """A writer that read the mark of version 2 (as the store holds it) and writes its
    version 1 (read from the registry before the change) writes nothing."""
    store = make_store(redis_client)
    base = store.server_time_ms() + 3_600 * SECOND
    store.write_ahead(QUEUE, ENTRY, None, f"2 {base}", [occurrence(base, version=2)])

    stale = store.write_ahead(
        QUEUE, ENTRY, f"2 {base}", f"1 {base + SECOND}", [occurrence(base + SECOND)], 0
    )
    assert (stale.written, stale.stale, stale.mark) == (False, True, f"2 {base}")
    assert pending_dues(store) == [base]
    # a conflict (another beat moved the mark) is no staleness: it is retried
    moved = store.write_ahead(QUEUE, ENTRY, "2 1", f"2 {base + SECOND}", [])
    assert (moved.written, moved.stale) == (False, False)
    # the same version, and a newer one, go on
    assert store.write_ahead(QUEUE, ENTRY, f"2 {base}", f"2 {base} 7", []).written
    assert store.write_ahead(QUEUE, ENTRY, f"2 {base} 7", f"10 {base}", [], 0).written
    assert pending_dues(store) == []


@pytest.mark.promise("periodic-versions-forward")
def test_a_tombstone_holds_off_older_versions_until_it_is_forgotten(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue(QUEUE)
    base = store.server_time_ms() + 3_600 * SECOND
    store.write_ahead(QUEUE, ENTRY, None, f"3 {base}", [occurrence(base, version=3)])
    removed = store.write_ahead(QUEUE, ENTRY, f"3 {base}", "4 removed", [], 0)
    assert (removed.written, removed.withdrawn) == (True, 1)
    assert not redis_client.hexists(keys.periodic_ahead, ENTRY)
    assert redis_client.zscore(keys.periodic_gone, ENTRY) is not None

    again = store.write_ahead(QUEUE, ENTRY, "4 removed", f"3 {base}", [occurrence(base)])
    assert (again.written, again.stale, pending_dues(store)) == (False, True, [])

    # re-added with a newer version: the tombstone is replaced, and no longer listed
    readded = store.write_ahead(QUEUE, ENTRY, "4 removed", f"5 {base}", [occurrence(base)])
    assert readded.written and pending_dues(store) == [base]
    assert redis_client.zcard(keys.periodic_gone) == 0
    store.write_ahead(QUEUE, ENTRY, f"5 {base}", "6 removed", [], 0)
    # other entries' removals forget tombstones older than they keep them, with their marks
    for n in range(3):
        store.write_ahead(QUEUE, f"other {n}", None, f"{7 + n} removed", [], 0, 3_600_000)
    assert redis_client.hlen(keys.periodic_marks) == 4
    store.write_ahead(QUEUE, "last", None, "20 removed", [], 0, gone_kept_ms=0)
    assert redis_client.hkeys(keys.periodic_marks) == [b"last"]
    assert redis_client.zrange(keys.periodic_gone, 0, -1) == [b"last"]


MARK_TEXTS = [
    "7 1700000000000",
    "7 1700000000000 1699999999000",
    "7 paused",
    "7 paused 1699999999000",
    "7 removed",
    "7 removed 1699999999000",
    "0007 5",
    "7 5 ",
    "7 5  ",
    "7  5",
    "7 paused5",
    "7 PAUSED",
    "7 5 x",
    "7 5 6 7",
    "7 x5",
    "7\t5",
    "7 5\n",
    "7 \u00b2",
    "\u00b27 5",
    "7 " + "9" * 16,
    "7 5 " + "9" * 16,
    "9" * 19 + " 5",
    "7 " + "5" * 60 + "!",
    "7 paused " + "1" * 45,
    "7",
    "x 7",
    "",
]


@pytest.mark.parametrize("text", MARK_TEXTS)
def test_the_store_reads_a_marks_version_as_the_writer_does(redis_client, text) -> None:
    """A mark the writer cannot read (it writes the entry anew) counts as version 0 in
    the store, else the store would refuse that write for good; one it reads has the same
    version in both."""
    store = make_store(redis_client)
    redis_client.hset(store.keys.for_queue(QUEUE).periodic_marks, ENTRY, text)
    outcome = store.write_ahead(QUEUE, ENTRY, text, "6 5", [])
    mark = Mark.parse(text)
    assert outcome.written == (mark is None or mark.version <= 6)
    assert outcome.stale == (mark is not None and mark.version > 6)


def test_tombstones_with_crafted_marks_are_pruned_in_bounded_time(redis_client) -> None:
    """Twenty tombstones due to be forgotten, each with a crafted 12 kB mark (digits, then a
    byte no mark has), and the entry's own: one call reads all 21 marks. Reading a mark
    once matched it with a backtracking pattern, in time quadratic in its length (seconds
    for these); now a mark longer than any mark is not matched at all."""
    store = make_store(redis_client)
    keys = store.keys.for_queue(QUEUE)
    crafted = "1 " + "1" * 12_000 + "!"
    for n in range(20):
        redis_client.hset(keys.periodic_marks, f"gone {n}", crafted)
        redis_client.zadd(keys.periodic_gone, {f"gone {n}": 0})
    redis_client.hset(keys.periodic_marks, ENTRY, crafted)
    redis_client.config_resetstat()
    written = store.write_ahead(QUEUE, ENTRY, crafted, "1 removed", [], 0, gone_kept_ms=1)
    took_us = int(redis_client.info("commandstats")["cmdstat_evalsha"]["usec"])
    assert written.written and redis_client.zrange(keys.periodic_gone, 0, -1) == [ENTRY.encode()]
    assert redis_client.hlen(keys.periodic_marks) == 21  # not tombstones: left as they are
    assert took_us < 250_000  # far above a call on well-formed marks (under 1 ms)
