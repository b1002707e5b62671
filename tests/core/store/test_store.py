"""The delayed store and its Lua scripts, against a real Redis (no Celery worker)."""

from __future__ import annotations

import multiprocessing
import random
import threading

import pytest
import redis

from celery_delayq.core.handover import MOVE_BATCH_BYTES
from celery_delayq.core.layout.keys import PAGE_SIZE, KeySpace
from celery_delayq.core.layout.queue_counters import LATENESS_BUCKETS_MS
from celery_delayq.core.layout.record import task_key
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import wait_until

pytestmark = pytest.mark.integration


def make_store(client: redis.Redis, batch: int = 500, prefix: str = "") -> DelayedStore:
    return DelayedStore(client, KeySpace(prefix, "delayq"), batch)


def schedule(store: DelayedStore, n: int, due_ms: int, queue: str = "q", task: str = "t") -> None:
    for i in range(n):
        store.schedule(
            Scheduled(
                queue=queue,
                message_id=f"m{i}",
                task_id=f"{task}{i}",
                due_ms=due_ms,
                destination=queue,
                payload=b'{"n": %d}' % i,
            )
        )


@pytest.mark.promise("never-moved-early")
def test_a_message_is_not_moved_before_it_is_due_by_the_redis_clock(redis_client):
    store = make_store(redis_client)
    schedule(store, 1, store.server_time_ms() + 60_000)

    result = store.move_all_due()

    assert result.moved == 0
    assert redis_client.llen("q") == 0
    assert 59 < result.seconds_until_next() <= 60


def test_a_due_message_reaches_its_list_byte_for_byte_and_leaves_the_store(redis_client):
    store = make_store(redis_client)
    payload = '{"big": 12345678901234567, "z": 1, "a": "é\\u0000"}'.encode() + b"\xff\x00"
    store.schedule(
        Scheduled(
            queue="q",
            message_id="m1",
            task_id="t1",
            due_ms=store.server_time_ms() - 1,
            destination="prefix:q\x06\x163",
            payload=payload,
        )
    )

    result = store.move_all_due()

    assert result.moved == 1
    assert result.next_due_ms is None
    assert redis_client.lrange("prefix:q\x06\x163", 0, -1) == [payload]
    keys = store.keys.for_queue("q")
    assert redis_client.zcard(keys.pages) == 0
    assert redis_client.hlen(keys.messages) == 0
    assert redis_client.keys(keys.page("*")) == []


def test_moves_are_bounded_batches_and_move_all_due_drains_every_queue(redis_client):
    store = make_store(redis_client, batch=100)
    now = store.server_time_ms()
    schedule(store, 250, now - 10, queue="a")
    schedule(store, 30, now - 10, queue="b")

    first = store.move_due("a")
    assert first.moved == 100
    assert redis_client.llen("a") == 100

    rest = store.move_all_due()
    assert rest.moved == 180
    assert redis_client.llen("a") == 250
    assert redis_client.llen("b") == 30


def test_messages_are_delivered_in_due_order(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    for i, offset in enumerate([30, 10, 20]):
        store.schedule(
            Scheduled(
                queue="q",
                message_id=f"m{i}",
                task_id="",
                due_ms=now - 100 + offset,
                destination="q",
                payload=b"%d" % offset,
            )
        )
    store.move_all_due()
    # kombu LPUSHes and consumers RPOP, so the oldest due is at the right end.
    assert redis_client.lrange("q", 0, -1)[::-1] == [b"10", b"20", b"30"]


def _drain(port: int, moved: multiprocessing.Value) -> None:  # type: ignore[valid-type]
    store = make_store(redis.Redis(port=port), batch=50)
    while True:
        result = store.move_all_due()
        with moved.get_lock():
            moved.value += result.moved
        if result.next_due_ms is None:
            return


@pytest.mark.promise("moved-exactly-once")
def test_four_concurrent_movers_deliver_10000_messages_exactly_once(redis_server, redis_client):
    store = make_store(redis_client)
    due = store.server_time_ms() + 300
    store.schedule_many(
        Scheduled("q", f"m{i}", f"t{i}", due + i % 50, "q", b"%d" % i) for i in range(10_000)
    )
    assert_pages_in_order(redis_client, store, "q", 10_000)
    moved = multiprocessing.Value("i", 0)
    movers = [
        multiprocessing.Process(target=_drain, args=(redis_server.port, moved)) for _ in range(4)
    ]
    for mover in movers:
        mover.start()
    for mover in movers:
        mover.join(60)
        assert mover.exitcode == 0

    delivered = redis_client.lrange("q", 0, -1)
    assert moved.value == 10_000
    assert len(delivered) == 10_000
    assert sorted(int(x) for x in delivered) == list(range(10_000))


def test_cancel_removes_every_pending_message_of_a_task_and_returns_the_count(redis_client):
    store = make_store(redis_client)
    later = store.server_time_ms() + 60_000
    for message_id, queue in [("m1", "q"), ("m2", "q"), ("m3", "other")]:
        store.schedule(
            Scheduled(
                queue=queue,
                message_id=message_id,
                task_id="same",
                due_ms=later,
                destination=queue,
                payload=b"x",
            )
        )
    schedule(store, 1, later, task="keep")

    assert store.cancel("same") == 3
    assert store.cancel("same") == 0
    assert store.cancel("never-seen") == 0
    assert [b.pending for b in store.backlog()] == [0, 1]


def test_cancel_after_the_move_finds_nothing(redis_client):
    store = make_store(redis_client)
    schedule(store, 1, store.server_time_ms() - 1)
    store.move_all_due()
    assert store.cancel("t0") == 0
    assert redis_client.llen("q") == 1


def test_moving_one_of_two_messages_of_a_task_keeps_the_other_cancellable(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    for message_id, due in [("early", now - 1), ("late", now + 60_000)]:
        store.schedule(
            Scheduled(
                queue="q",
                message_id=message_id,
                task_id="t",
                due_ms=due,
                destination="q",
                payload=message_id.encode(),
            )
        )
    store.move_all_due()
    assert [m.record.payload for m in store.find("t")] == [b"late"]
    assert store.cancel("t") == 1
    assert redis_client.hlen(store.keys.for_queue("q").duplicates) == 0


def test_reschedule_changes_due_time_and_rewrites_the_payload(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    schedule(store, 1, now + 60_000)

    changed = store.reschedule("t0", now - 1, lambda payload: payload + b" rewritten")

    assert changed == 1
    assert store.move_all_due().moved == 1
    # an envelope is delivered with the store's due-time key first (core/layout/record.py)
    assert redis_client.lrange("q", 0, -1) == [b'{"delayq":%d,"n": 0} rewritten' % (now - 1)]
    assert store.reschedule("t0", now, lambda payload: payload) == 0


def test_scheduling_a_new_earliest_message_wakes_movers(redis_client):
    store = make_store(redis_client)
    pubsub = redis_client.pubsub()
    pubsub.subscribe(store.keys.wakeup_channel)
    assert wait_until(lambda: pubsub.get_message(timeout=1))["type"] == "subscribe"
    now = store.server_time_ms()

    def earliest(name: str, due_ms: int) -> bool:
        return store.schedule(Scheduled("q", name, "", due_ms, "q", name.encode()))

    assert earliest("a", now + 5000) is True
    assert earliest("b", now + 9000) is False
    assert earliest("c", now + 1000) is True

    # Pub/sub keeps order: every wake-up published so far arrives before this marker.
    redis_client.publish(store.keys.wakeup_channel, b"end of test")
    woken = []
    while (message := wait_until(lambda: pubsub.get_message(timeout=1)))["data"] != b"end of test":
        woken.append(int(message["data"]))
    assert woken == [now + 5000, now + 1000]
    pubsub.close()


def test_an_eta_in_year_9999_is_stored_and_listed(redis_client):
    store = make_store(redis_client)
    year_9999_ms = 253_402_300_799_000
    schedule(store, 1, year_9999_ms)

    assert store.move_all_due().next_due_ms == year_9999_ms
    (backlog,) = store.backlog()
    assert (backlog.pending, backlog.overdue, backlog.next_due) == (1, 0, 253_402_300_799.0)


@pytest.mark.promise("crafted-input-stops-nothing")
def test_an_unreadable_record_does_not_block_the_queue_and_is_dead_lettered(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    keys = store.keys.for_queue("q")
    schedule(store, 2, now - 1)
    redis_client.hset(keys.messages, task_key("t0"), b"not a record")
    (page,) = redis_client.zrange(keys.pages, 0, 0)
    redis_client.zadd(keys.page(page), {b"ghost": now - 2})

    result = store.move_all_due()

    assert (result.moved, result.missing) == (1, 2)
    assert redis_client.lrange("q", 0, -1) == [b'{"delayq":%d,"n": 1}' % (now - 1)]
    assert redis_client.hget(keys.messages, task_key("t0")) is None
    (letter,) = store.dead_letters("q")
    assert (letter.key, letter.record.payload) == (task_key("t0"), b"not a record")
    assert letter.reason == "unreadable record: bad due time"


def test_scripts_are_reloaded_after_noscript(redis_client):
    store = make_store(redis_client)
    schedule(store, 1, store.server_time_ms() - 1)
    redis_client.script_flush()
    assert store.move_all_due().moved == 1


def test_a_schedule_after_noscript_loads_the_script_and_stores(redis_client):
    store = make_store(redis_client)
    redis_client.script_flush()
    schedule(store, 1, store.server_time_ms() + 60_000)
    assert store.find("t0")
    assert redis_client.script_exists(store.scripts.schedule.sha) == [True]


def test_global_keyprefix_is_applied_to_every_store_key(redis_client):
    store = make_store(redis_client, prefix="app1:")
    schedule(store, 1, store.server_time_ms() + 60_000)
    assert sorted(redis_client.keys("*")) == [
        b"app1:delayq:queues",
        b"app1:delayq:{q}:msg",
        b"app1:delayq:{q}:p:1",
        b"app1:delayq:{q}:pages",
        b"app1:delayq:{q}:stats",
    ]


def test_movers_in_threads_share_nothing_but_redis(redis_client, redis_server):
    """Threads with their own clients, the way worker and beat movers run."""
    store = make_store(redis_client, batch=10)
    schedule(store, 500, store.server_time_ms() - 1)
    stores = [make_store(redis.Redis(port=redis_server.port), batch=10) for _ in range(4)]
    totals: list[int] = []
    threads = [
        threading.Thread(target=lambda s=s: totals.append(s.move_all_due().moved)) for s in stores
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(totals) == 500
    assert redis_client.llen("q") == 500


@pytest.mark.parametrize("batch", [1, 7])
def test_small_batches_still_drain_everything(redis_client, batch):
    store = make_store(redis_client, batch=batch)
    schedule(store, 20, store.server_time_ms() - 1)
    assert store.move_all_due().moved == 20


def assert_pages_in_order(client: redis.Redis, store: DelayedStore, queue: str, n: int) -> None:
    """The page layout's invariants: listed pages are non-empty listpacks (unless one due
    time filled them), each page's due times lie at or after its start and after every
    due time of the page before, and pages hold exactly the records."""
    keys = store.keys.for_queue(queue)
    previous_last, total = float("-inf"), 0
    for page, start in client.zrange(keys.pages, 0, -1, withscores=True):
        entries = client.zrange(keys.page(page), 0, -1, withscores=True)
        assert entries, "an empty page is listed"
        assert entries[0][1] >= start and entries[0][1] > previous_last
        if len({due for _, due in entries}) > 1:
            assert len(entries) <= PAGE_SIZE
            assert client.object("encoding", keys.page(page)) in (b"listpack", b"ziplist")
        previous_last, total = entries[-1][1], total + len(entries)
    assert total == client.hlen(keys.messages) == n


def test_a_flood_of_messages_due_in_one_millisecond_is_delivered_in_order(redis_client):
    store = make_store(redis_client, batch=100)
    now = store.server_time_ms()
    groups = [
        ("flood", now + 50, 3 * PAGE_SIZE),
        ("early", now + 10, PAGE_SIZE),
        ("late", now + 90, PAGE_SIZE),
    ]
    for name, due, count in groups:  # one due time for the flood: its page grows past the size
        for i in range(count):
            store.schedule(
                Scheduled(
                    queue="q",
                    message_id=f"{name}{i}",
                    task_id=f"{name}{i}",
                    due_ms=due,
                    destination="q",
                    payload=name.encode(),
                )
            )
    assert_pages_in_order(redis_client, store, "q", 5 * PAGE_SIZE)

    wait_until(lambda: store.server_time_ms() > now + 90)
    assert store.move_all_due().moved == 5 * PAGE_SIZE
    delivered = redis_client.lrange("q", 0, -1)[::-1]  # LPUSHed: the oldest is at the end
    assert delivered == [b"early"] * PAGE_SIZE + [b"flood"] * 3 * PAGE_SIZE + [b"late"] * PAGE_SIZE
    assert redis_client.zcard(store.keys.for_queue("q").pages) == 0


def test_random_schedules_cancels_and_reschedules_keep_the_pages_in_order(redis_client):
    store = make_store(redis_client)
    rnd = random.Random(7)
    now = store.server_time_ms()
    tasks = [f"t{i}" for i in range(2000)]
    for task in tasks:
        store.schedule(
            Scheduled(
                queue="q",
                message_id=task,
                task_id=task,
                destination="q",
                due_ms=now + 60_000 + rnd.choice([0, 0, rnd.randint(0, 5000)]),
                payload=task.encode(),
            )
        )
    rnd.shuffle(tasks)
    assert sum(store.cancel(task) for task in tasks[:500]) == 500
    moved_early = tasks[500:800]
    for task in moved_early:
        assert store.reschedule(task, now - 1, lambda payload: payload) == 1
    for task in tasks[800:1100]:
        assert store.reschedule(task, now + rnd.randint(60_000, 10**7), lambda p: p) == 1
    assert_pages_in_order(redis_client, store, "q", 1500)

    assert store.move_all_due().moved == 300
    assert sorted(redis_client.lrange("q", 0, -1)) == sorted(t.encode() for t in moved_early)
    assert_pages_in_order(redis_client, store, "q", 1200)


def test_a_second_message_of_a_task_id_is_kept_moved_and_cancelled_too(redis_client):
    store = make_store(redis_client)
    now = store.server_time_ms()
    for n, due in enumerate([now + 60_000, now - 1, now + 60_000]):
        store.schedule(
            Scheduled(
                queue="q",
                message_id=f"m{n}",
                task_id="same",
                due_ms=due,
                destination="q",
                payload=b"copy %d" % n,
            )
        )
    assert len(store.find("same")) == 3
    assert store.move_all_due().moved == 1
    assert redis_client.lrange("q", 0, -1) == [b"copy 1"]
    assert sorted(m.record.payload for m in store.find("same")) == [b"copy 0", b"copy 2"]
    assert store.cancel("same") == 2
    assert redis_client.hlen(store.keys.for_queue("q").messages) == 0
    assert redis_client.hlen(store.keys.for_queue("q").duplicates) == 0


def test_one_move_stops_after_its_byte_budget_and_the_next_goes_on(redis_client):
    store = make_store(redis_client)
    big = b"x" * (MOVE_BATCH_BYTES // 4)
    for i in range(10):
        store.schedule(
            Scheduled(
                queue="q",
                message_id=f"m{i}",
                task_id=f"t{i}",
                due_ms=store.server_time_ms() - 1,
                destination="q",
                payload=big,
            )
        )

    first = store.move_due("q")

    assert first.moved == 4
    assert first.next_due_ms is not None and first.next_due_ms <= first.now_ms
    assert store.move_all_due().moved == 6


def test_a_flood_in_one_millisecond_then_an_earlier_message_splits_cleanly(redis_client):
    """20,000 messages due in one millisecond make one big page; an earlier message then
    splits it, moving 20,000 entries at once (beyond Lua's unpack limit, so in chunks)."""
    store = make_store(redis_client)
    due = store.server_time_ms() + 100
    store.schedule_many(Scheduled("q", f"m{i}", None, due, "q", b"flood") for i in range(20_000))
    store.schedule(
        Scheduled(
            queue="q",
            message_id="first",
            task_id=None,
            due_ms=due - 50,
            destination="q",
            payload=b"first",
        )
    )
    assert_pages_in_order(redis_client, store, "q", 20_001)

    wait_until(lambda: store.server_time_ms() > due)
    assert store.move_all_due().moved == 20_001
    assert redis_client.lindex("q", -1) == b"first"


def test_the_lateness_histogram_counts_every_message_of_a_batch_in_its_own_bucket(redis_client):
    """Messages of one batch come in due order, and the script tries the previous
    message's bucket first: lateness that changes bucket from one message to the next,
    goes back and forth between equal values, or repeats, is counted exactly."""
    store = make_store(redis_client)
    now = store.server_time_ms()
    late_by = [0, 3, 3, 7, 12, 12, 12, 40, 99, 260, 600, 1_400, 4_000, 9_000, 20_000, 45_000]
    late_by += [70_000, 3_600_000, 6, 6]
    for i, late in enumerate(late_by):
        store.schedule(Scheduled("q", f"m{i}", f"t{i}", now - late, "q", b"{}"))

    result = store.move_all_due()

    assert result.moved == len(late_by)
    # lateness as the script saw it: its own clock minus each due time
    lateness = sorted((result.now_ms - (now - late) for late in late_by), reverse=True)
    expected: dict[str, int] = {}
    for late in lateness:
        bound = next((b for b in LATENESS_BUCKETS_MS if late <= b), None)
        field = f"late_le_{bound if bound is not None else 'inf'}"
        expected[field] = expected.get(field, 0) + 1
    stats = {
        k.decode(): int(v) for k, v in redis_client.hgetall(store.keys.for_queue("q").stats).items()
    }
    assert {k: v for k, v in stats.items() if k.startswith("late_le_")} == expected
    assert stats["late_count"] == len(late_by)
    assert stats["late_sum_ms"] == sum(lateness)
    assert result.max_lateness_ms == max(lateness)


def test_listings_read_across_many_pages_in_due_order(redis_client):
    """More pages than pending.lua reads from the page index at once (32), random dues:
    every listing (oldest or latest first, within a window, cut at a limit) is exactly
    the sorted slice."""
    store = make_store(redis_client)
    rng = random.Random(7)
    dues = {f"t{i}": rng.randrange(10**12, 10**12 + 10**7) for i in range(60 * PAGE_SIZE)}
    store.schedule_many(
        Scheduled("q", f"m{task}", task, due, "q", b"{}") for task, due in dues.items()
    )
    assert redis_client.zcard(store.keys.for_queue("q").pages) > 64
    ordered = sorted(dues.values())

    assert [m.due_ms for m in store.pending(limit=len(dues))] == ordered
    assert [m.due_ms for m in store.pending(limit=5000, newest_first=True)] == ordered[::-1][:5000]
    low, high = ordered[1000], ordered[4000]
    window = store.pending(due_after=low / 1000, due_before=high / 1000, limit=10**6)
    assert [m.due_ms for m in window] == [d for d in ordered if low <= d <= high]
    latest = store.pending(
        due_after=low / 1000, due_before=high / 1000, limit=50, newest_first=True
    )
    assert [m.due_ms for m in latest] == [d for d in ordered if low <= d <= high][::-1][:50]
