"""The store against hostile shapes and bytes (issue 25, findings 3, 12 and 13), on a real
Redis: many messages due at one instant, records outside the grammar, and queue names
that would break the key space."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from celery_delayq.core.handover.claims import ClaimPublishAck
from celery_delayq.core.handover.publishing import ConfirmedOnReturn, Outgoing, PublishReport
from celery_delayq.core.health.consistency import consistency_findings
from celery_delayq.core.health.health_checks import OK
from celery_delayq.core.layout.keys import PAGE_SIZE, KeySpace, QueueKeys
from celery_delayq.core.layout.record import INLINE_PREFIX, Record, task_key
from celery_delayq.core.lua import HELPERS, PRELUDE
from celery_delayq.core.store import DelayedStore, Scheduled

pytestmark = pytest.mark.adversarial

HOUR_MS = 3_600_000
FIXTURE_SETTINGS = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def make_store(client: redis.Redis, shards: int = 1) -> DelayedStore:
    return DelayedStore(client, KeySpace(shards=shards), 500)


def message(n: int, due_ms: int, queue: str = "q") -> Scheduled:
    return Scheduled(queue, f"m{n}", f"t{n}", due_ms, queue, b'{"n": %d}' % n)


def check_pages(client: redis.Redis, keys: QueueKeys) -> None:
    """The page invariants of lua/prelude.lua: order, distinct starts, the first page's
    start at its earliest, and a page over PAGE_SIZE entries of one single due time."""
    pages = client.zrange(keys.pages, 0, -1, withscores=True)
    starts = [start for _, start in pages]
    assert starts == sorted(set(starts))
    scheduled = set()
    for i, (page, start) in enumerate(pages):
        entries = client.zrange(keys.page(page), 0, -1, withscores=True)
        dues = [due for _, due in entries]
        assert dues, f"page {page!r} is empty but listed"
        assert min(dues) >= start
        if i == 0:
            assert min(dues) == start
        if i + 1 < len(pages):
            assert max(dues) < pages[i + 1][1]
        if len(dues) > PAGE_SIZE:
            assert min(dues) == max(dues), f"page {page!r} is over {PAGE_SIZE} and not hot"
        scheduled.update(key for key, _ in entries)
    assert scheduled == set(client.hkeys(keys.messages))


# -- finding 3: many messages due at one instant


def test_a_message_due_before_or_after_a_hot_instant_never_copies_its_page(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    hot = store.server_time_ms() + HOUR_MS
    store.schedule_many(message(n, hot) for n in range(10 * PAGE_SIZE))
    (hot_page,) = redis_client.zrange(keys.pages, 0, -1)

    # the hot page is the first: each of these used to copy all of it to a new page
    for n, due in enumerate((hot - 1000, hot + 1000, hot - 2000, hot + 500), 10 * PAGE_SIZE):
        store.schedule(message(n, due))

    assert redis_client.zcard(keys.page(hot_page)) == 10 * PAGE_SIZE
    assert redis_client.zscore(keys.pages, hot_page) == hot
    check_pages(redis_client, keys)


@pytest.mark.promise("moved-exactly-once")
def test_the_pages_keep_their_invariants_and_deliver_each_message_once(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    rng = random.Random(25)
    base = store.server_time_ms() + HOUR_MS
    instants = [base + 1000 * i for i in range(4)]
    scheduled, n = set(), 0
    for _ in range(60):
        kind = rng.random()
        if kind < 0.5:  # a burst at an instant, or messages around one
            burst = rng.choice([1, 5, PAGE_SIZE + 3])
            spread = rng.choice([0, 0, 3000])
            store.schedule_many(
                message(n + i, rng.choice(instants) + rng.randint(-spread, spread))
                for i in range(burst)
            )
            scheduled.update(f"t{n + i}" for i in range(burst))
            n += burst
        elif kind < 0.8:  # the mover, judging some of the instants due
            store.handover.ahead_ms = rng.choice(instants) - store.server_time_ms()
            store.move_due("q")
        else:  # a cancel
            if scheduled:
                store.cancel(rng.choice(sorted(scheduled)))
        check_pages(redis_client, keys)
    store.handover.ahead_ms = 2 * HOUR_MS
    while store.move_due("q").moved:
        pass
    delivered = [raw for raw in redis_client.lrange("q", 0, -1)]
    assert len(delivered) == len(set(delivered))
    assert redis_client.hlen(keys.messages) == 0


# -- finding 12: one grammar for records, and a dead-letter path for unreadable ones

PARSE = (
    PRELUDE
    + HELPERS
    + """
local out = {}
for i = 3, #ARGV do
  local due, destination, start, expires, delay_key, gate = parse(ARGV[i])
  if start then
    out[#out + 1] = {1, due, destination and 1 or 0, destination or '', start,
                     expires and 1 or 0, expires or '', delay_key and 1 or 0, delay_key or '',
                     gate and 1 or 0, gate or ''}
  else
    out[#out + 1] = {0, destination or ''}
  end
end
return out
"""
)
OWN = "own-list"

HAND_WRITTEN = [
    b"",
    b":",
    b"12",
    b"12:",
    b"12:payload",
    b"0:",
    b"-1:p",
    b"+1:p",
    b"1e3:p",
    b"1.5:p",
    b"0x10:p",
    b" 12:p",
    b"12 :p",
    b"\t12:p",
    b"9" * 15 + b":p",
    b"9" * 16 + b":p",
    b"9" * 400 + b":p",
    b"100d-1:p",
    b"100d-1::p",
    b"100d+3:abc:p",
    b"100d0x3:abc:p",
    b"100d 3:abc:p",
    b"100d3e0:abc:p",
    b"100d3.0:abc:p",
    b"100d:abc:p",
    b"100d0::p",
    b"100d3:abc:p",
    b"100d9:abc:p",
    b"100d3:ab",
    b"100d3:abc",
    b"100d" + b"9" * 16 + b":abc:p",
    b"100x:p",
    b"100x-5:p",
    b"100x5:p",
    b"100x1e3:p",
    b"100x" + b"9" * 16 + b":p",
    b"100k-1:p",
    b"100k0::p",
    b"100k2:ab:p",
    b"100k2:ab",
    b"100d1:\xffx5k1:z:payload",
    b"100k1:zx5:p",
    b"100x5d1:a:p",
    b"100l0::p",
    b"100l3:a b:p",
    b"100l3:a b",
    b"100l-1:p",
    b"100l4:a b:p",
    b"100l2:a b:p",
    b"100l" + b"9" * 16 + b":a:p",
    b"100k1:zl3:r b:p",
    b"100l3:r bk1:z:p",
    b"100x5k1:zl3:r b:p",
    b"100d1:ax5k1:zl5:r1/1 :p",
    b"100l3:\x00 \n:p",
    b"100ll1:a:p",
    b'{"delayq":12,"l3:a b":1}',
    b'{"delayq":12l3:a b:p',
    b'{"delayq":12,"a":1}',
    b'{"delayq":12,',
    b'{"delayq":12',
    b'{"delayq":-1,"a":1}',
    b'{"delayq":+1,"a":1}',
    b'{"delayq":1e3,"a":1}',
    b'{"delayq":0x1,"a":1}',
    b'{"delayq": 12,"a":1}',
    b'{"delayq":,"a":1}',
    b'{"delayq":' + b"9" * 16 + b',"a":1}',
    b'{"delayq":12:p',
    b'{"delayq"12,"a":1}',
    b"{12:p",
]
PIECES = [
    b"0", b"7", b"12", b"1700000000000", b"-1", b"+1", b"1e3", b"1.5", b"0x1f", b" 1",
    b"", b"9" * 15, b"9" * 16, b"d", b"x", b"k", b":", b":", INLINE_PREFIX, b",", b"{",
    b"abc", b"\xff\x00", b"3:", b"0:", b"3:abc", b"\t", b"inf", b"nan", b"-", b"l", b"l3:a b",
    b"l5:r1/1 ",
]  # fmt: skip
RECORDS = st.one_of(
    st.binary(max_size=40), st.lists(st.sampled_from(PIECES), max_size=8).map(b"".join)
)


def lua_parse(client: redis.Redis, records: list[bytes]) -> list[list[bytes | int]]:
    return client.eval(PARSE, 0, "p:", PAGE_SIZE, *records)  # type: ignore[no-any-return]


def same_verdict(raw: bytes, lua: list[bytes | int]) -> None:
    """Record.decode reads ``raw`` exactly as the Lua parse did (``lua``)."""
    try:
        record: Record | None = Record.decode(raw, OWN)
    except ValueError:
        record = None
    if not lua[0]:
        assert record is None, f"Lua refuses {raw!r} ({lua[1]!r}), Python reads {record}"
        return
    assert record is not None, f"Lua reads {raw!r} as {lua}, Python refuses it"
    _, due, has_destination, destination, start, has_expires, expires, has_key, key = lua[:9]
    has_gate, gate = lua[9:]
    assert record.due_ms == int(due)
    if has_destination:
        assert record.destination.encode("utf-8", "surrogateescape") == destination
    else:
        assert record.destination == OWN
    assert record.expires_ms == (int(expires) if has_expires else None)
    assert record.delay_key == (key if has_key else None)
    assert record.gate == (gate if has_gate else None)
    if start == 1:  # inline: delivered whole
        assert raw.startswith(INLINE_PREFIX)
        assert record.payload == b"{" + raw[raw.index(b",") + 1 :]
    else:
        assert record.payload == raw[int(start) - 1 :]


def test_lua_and_python_read_hand_written_records_alike(redis_client):
    for raw, lua in zip(HAND_WRITTEN, lua_parse(redis_client, HAND_WRITTEN)):
        same_verdict(raw, lua)


@FIXTURE_SETTINGS
@given(st.lists(RECORDS, min_size=1, max_size=20))
@example(records=[b"100d-1:p"])
def test_lua_and_python_read_any_bytes_alike(redis_client, records):
    for raw, lua in zip(records, lua_parse(redis_client, records)):
        same_verdict(raw, lua)


def unreadable_in_schedule(client: redis.Redis, keys: QueueKeys, raw: bytes, due: int) -> bytes:
    """Put an unreadable record in the store, with a page entry at ``due``."""
    key = task_key("bad")
    client.hset(keys.messages, key, raw)
    page = client.zrange(keys.pages, 0, 0)[0]
    client.zadd(keys.page(page), {key: due})
    client.zadd(keys.pages, {page: min(due, client.zscore(keys.pages, page) or due)})
    return key


@pytest.mark.promise("crafted-input-stops-nothing")
def test_an_unreadable_record_goes_to_the_dead_letters_with_a_warning(redis_client, caplog):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    now = store.server_time_ms()
    store.schedule(message(1, now - 1))
    # Lua's tonumber read "-1" as a length: this record was pushed to the key ""
    key = unreadable_in_schedule(redis_client, keys, b"%dd-1:payload" % (now - 2), now - 2)

    with caplog.at_level(logging.WARNING, logger="celery_delayq"):
        result = store.move_all_due()

    assert (result.moved, result.missing) == (1, 1)
    assert redis_client.exists("") == 0
    assert redis_client.hget(keys.messages, key) is None
    (letter,) = store.dead_letters("q")
    assert letter.key == key and letter.reason == "unreadable record: bad destination"
    assert "1 due message(s) of queue 'q' had a missing or unreadable record" in caplog.text
    check_pages(redis_client, keys)


@settings(FIXTURE_SETTINGS, max_examples=50)
@given(st.lists(RECORDS, min_size=1, max_size=8))
@example(records=[b"0:", b"0:\x00"])
@example(records=[b"1:q", b"0l3:a b:p"])
@example(records=[b"999999999999999l3:a b:p", b"5l3:a c:p", b"6l3:a b:s"])
@pytest.mark.promise("crafted-input-stops-nothing")
def test_a_move_delivers_every_readable_record_and_dead_letters_the_rest(redis_client, records):
    redis_client.flushall()
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    now = store.server_time_ms()
    store.schedule(message(0, now + HOUR_MS))  # a page to put the entries in
    expected: dict[bytes, list[bytes]] = {}
    gated: list[tuple[bytes, int, bytes, bytes]] = []  # bucket, n, destination, payload
    unreadable = stale = 0
    for n, raw in enumerate(records):
        key = task_key(f"raw{n}")
        redis_client.hset(keys.messages, key, raw)
        redis_client.zadd(keys.page(1), {key: now - 1 - n})
        try:
            record = Record.decode(raw, "q")
        except ValueError:
            unreadable += 1
            continue
        destination = record.destination.encode("utf-8", "surrogateescape")
        delivered = raw if raw.startswith(INLINE_PREFIX) else record.payload
        spec, _, bucket = (record.gate or b"").partition(b" ")
        if bucket:  # flow-controlled (no valid limit: unlimited); released after the rest
            if record.due_ms > now + HOUR_MS:
                stale += 1  # its record says it is due later: dropped from its bucket
            else:
                gated.append((bucket, n, destination, delivered))
            continue
        # entries due ever earlier: moved last first, each LPUSHed in front
        expected.setdefault(destination, []).append(delivered)
    redis_client.zadd(keys.pages, {1: now - len(records)})
    # pushed after the rest: bucket by bucket in name order (all ready at 0), each in due
    # order; each LPUSHed in front
    for _, _, destination, delivered in sorted(gated, key=lambda g: (g[0], -g[1])):
        expected.setdefault(destination, []).insert(0, delivered)

    store.move_all_due()

    assert redis_client.hlen(keys.messages) == 1 + stale
    assert len(store.dead_letters("q")) == unreadable
    for destination, payloads in expected.items():
        assert redis_client.lrange(destination, 0, -1) == payloads


class ConfirmingPublisher(ConfirmedOnReturn):
    """Stands in for the other broker of the claim path: confirms every message."""

    def __init__(self) -> None:
        self.published: list[Outgoing] = []

    def publish_now(self, messages: Sequence[Outgoing]) -> PublishReport:
        self.published.extend(messages)
        return PublishReport(confirmed=[m.key for m in messages])

    def close(self) -> None:
        pass


@pytest.mark.promise("crafted-input-stops-nothing")
def test_the_claim_path_dead_letters_an_unreadable_record_too(redis_client, caplog):
    publisher = ConfirmingPublisher()
    handover = ClaimPublishAck(redis_client, lambda: publisher)
    store = DelayedStore(redis_client, KeySpace(), 500, handover=handover)
    keys = store.keys.for_queue("q")
    now = store.server_time_ms()
    store.schedule(message(1, now - 1))
    key = unreadable_in_schedule(redis_client, keys, b"%dk-1:p" % (now - 2), now - 2)

    with caplog.at_level(logging.WARNING, logger="celery_delayq"):
        store.move_all_due()

    assert [m.payload for m in publisher.published] == [b'{"n": 1}']
    (letter,) = store.dead_letters("q")
    assert (letter.key, letter.reason) == (key, "unreadable record: bad delay key")
    assert "had a missing or unreadable record" in caplog.text
    assert redis_client.hlen(keys.messages) == 0


def test_doctor_repair_moves_unreadable_records_to_the_dead_letters(redis_client):
    store = make_store(redis_client)
    keys = store.keys.for_queue("q")
    later = store.server_time_ms() + HOUR_MS
    store.schedule(message(1, later))
    key = unreadable_in_schedule(redis_client, keys, b"%dx-5:p" % later, later)
    (finding,) = consistency_findings(store)
    assert "1 unreadable records" in finding.message and "--repair" in finding.fix

    consistency_findings(store, repair=True)

    assert [f.level for f in consistency_findings(store)] == [OK]
    (letter,) = store.dead_letters("q")
    assert (letter.key, letter.reason) == (key, "unreadable record: bad x-expires")
    assert store.pending_counts(["q"]) == {"q": 1}
    check_pages(redis_client, keys)


# -- finding 13: queue names that would break the key space

NAMES = st.text(alphabet="a}{|01", max_size=5)


def key_names(keys: QueueKeys, space: KeySpace) -> set[str]:
    """Every key of one queue shard (a queue's inspect claims go with its shard 0)."""
    inspect = [space.inspect_claim(keys.queue, "t")] if keys.shard == 0 else []
    return {*keys.handover_keys(), keys.page(1), *inspect}


def hash_tag(key: str) -> str:
    """The part of a key Redis Cluster hashes, when it has a non-empty hash tag."""
    start = key.index("{")
    end = key.index("}", start + 1)
    assert end > start + 1, f"{key!r} has an empty hash tag: its keys spread over slots"
    return key[start + 1 : end]


@settings(max_examples=300)
@given(NAMES, NAMES)
@example("a|1", "a")
@example("", "}")
@example("}a", "|7d61")
def test_no_two_queue_shards_share_a_key_and_each_stays_in_one_slot(first, second):
    space = KeySpace(shards=3)
    names = {
        (queue, shard): key_names(space.for_queue(queue, shard), space)
        for queue in {first, second}
        for shard in range(3)
    }
    for (queue, shard), keys in names.items():
        assert len({key_slot(hash_tag(key).encode()) for key in keys}) == 1
        for other, other_keys in names.items():
            if other != (queue, shard):
                assert not keys & other_keys, f"{(queue, shard)} and {other} share keys"


@settings(FIXTURE_SETTINGS, max_examples=40)
@given(st.lists(NAMES, min_size=1, max_size=4, unique=True))
def test_any_queue_names_each_get_exactly_their_own_messages(redis_client, names):
    redis_client.flushall()
    store = make_store(redis_client, shards=2)
    now = store.server_time_ms()
    for queue in names:
        for n in range(3):
            store.schedule(Scheduled(queue, f"m{n}", f"{queue}/{n}", now - 1, queue, b"%d" % n))

    store.move_all_due()

    for queue in names:
        assert sorted(redis_client.lrange(queue, 0, -1)) == [b"0", b"1", b"2"], queue


def test_ordinary_queue_names_keep_their_keys():
    space = KeySpace(shards=2)
    for name in ("celery", "a|b", "x}y", "{q}", "émoji🙂"):
        assert space.for_queue(name).messages == f"delayq:{{{name}}}:msg"
        assert space.for_queue(name, 1).pages == f"delayq:{{{name}|1}}:pages"


@pytest.mark.parametrize("shards", [1, 3])
def test_hostile_queue_names_each_get_exactly_their_own_messages(redis_client, shards):
    store = make_store(redis_client, shards)
    names = ["", "}", "}a", "a", "a|1", "a|2", "|", "a|", "{", "{a}", "|61"]
    now = store.server_time_ms()
    for n in range(40):
        for queue in names:
            store.schedule(Scheduled(queue, f"m{n}", f"{queue}/{n}", now - 1, queue, b"%d" % n))

    store.move_all_due()

    for queue in names:
        got = sorted(int(raw.rpartition(b":")[2]) for raw in redis_client.lrange(queue, 0, -1))
        assert got == list(range(40)), queue
    assert sum(store.pending_counts(names).values()) == 0


def test_counts_read_in_bounded_calls_add_up_exactly(redis_client, monkeypatch):
    monkeypatch.setattr("celery_delayq.core.store.counts.COUNT_PAGES", 2)
    store = make_store(redis_client, shards=2)
    now = store.server_time_ms()
    store.schedule_many(message(n, now - 1000 + 7 * n) for n in range(1500))
    pages = sum(redis_client.zcard(keys.pages) for keys in store.keys.shards_of("q"))
    assert pages > 2 * 2 * 2  # several bounded calls per shard

    (backlog,) = store.backlog()
    timeline = store.timeline([-math.inf, (now + 2000) / 1000, math.inf])

    read_at = round(backlog.server_time * 1000)
    overdue = sum(1 for n in range(1500) if now - 1000 + 7 * n <= read_at)
    assert (backlog.pending, backlog.overdue) == (1500, overdue)
    assert timeline == {"q": [sum(1 for n in range(1500) if 7 * n < 3000), 1500 - 429]}


def test_doctor_reads_a_hot_page_in_bounded_reads_and_finds_it_whole(redis_client, monkeypatch):
    monkeypatch.setattr("celery_delayq.core.store.admin.PAGE_READ", 7)
    store = make_store(redis_client)
    hot = store.server_time_ms() + HOUR_MS
    store.schedule_many(message(n, hot) for n in range(PAGE_SIZE + 50))

    entries = store.page_entries(store.keys.for_queue("q"))

    assert len(entries) == PAGE_SIZE + 50
    assert [f.level for f in consistency_findings(store)] == [OK]
