"""Fuzz tests: odd, malformed and oversized messages through the transport's publish path,
and arbitrary payloads through the store.

The property, for every message: it is refused with a clear error and nothing at all is
written; or it is queued at once, or stored and later delivered, byte for byte as plain
kombu pushes it (a delivered envelope may start with the store's due-time key: then it
is plain kombu's bytes with that key inserted, and its value is the due time). Plain
kombu is run beside the transport, on another database of the same Redis, as the
reference. The store is never left inconsistent.

Only public behaviour is read: kombu's queue lists, whole-database snapshots, the store's
public methods and ``consistency_findings``; never the store's key names or encodings.

Near Redis's 512 MB limit (not run: it needs gigabytes of memory and blocks Redis for
seconds): ``proto-max-bulk-len`` (default 512 MB) caps every single argument of a command.
Plain kombu's LPUSH carries the payload alone; the store's schedule call carries it inside
the record, a few bytes longer (more with a priority sub-list as destination), so a
payload just below the cap is pushed by plain kombu but refused by Redis for the store
(a protocol error, the connection is closed, nothing is written; tested below with the
smallest cap Redis allows, 1 MB). The publisher sees a ``redis.ResponseError`` or, when
Redis closes the connection before the whole payload is sent, a ``redis.ConnectionError``.
Well before the cap, the store's scripts may copy such a payload inside Lua (moving
slices it out of a record that names a priority sub-list), so Redis briefly holds two or
three copies, Lua memory that maxmemory does not count, and is blocked while copying; the
publisher's own memory (JSON and base64 of the body, about 1.4 times its size) and
``client-query-buffer-limit`` (1 GB) bound it too.
"""

from __future__ import annotations

import contextlib
import copy
import math
import string
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pytest
import redis
from celery import Celery
from celery.utils.time import maybe_iso8601, maybe_make_aware
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kombu.connection import Connection
from kombu.entity import Exchange
from kombu.utils.json import dumps, loads

from celery_delayq import InvalidETA
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.store import DelayedStore, Scheduled
from celery_delayq.testing import PRIORITY_SEP as SEP
from celery_delayq.testing import RedisServer, wait_until

from .observe import as_scheduled, due_ms_of, inconsistencies, payload_of, snapshot

pytestmark = pytest.mark.integration

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: A stored message due within this many ms is waited for instead of rescheduled.
WAIT_AT_MOST_MS = 100


def lists(client: redis.Redis) -> dict[bytes, list[bytes]]:
    """Every list of the database (the store keeps no lists, so: kombu's queue lists),
    oldest message first."""
    names = sorted(client.scan_iter(count=1000, _type="list"))
    return {name: cast("list[bytes]", client.lrange(name, 0, -1))[::-1] for name in names}


def worker_eta(eta: Any) -> float | None:
    """When a Celery worker would run a message with this ``eta`` header, in epoch seconds,
    read with the helpers ``celery.worker.request`` uses; None if it cannot be read."""
    if not isinstance(eta, (str, datetime)):
        return None
    try:
        return maybe_make_aware(maybe_iso8601(eta), timezone.utc).timestamp()
    except Exception:  # noqa: BLE001 - any failure means the worker could not read it
        return None


@dataclass(frozen=True)
class Soon:
    """An ETA ``ms`` from the moment of publishing, written with ``suffix`` as its UTC
    offset (the wall-clock time is converted when the suffix is a valid offset)."""

    ms: int
    suffix: str

    def render(self) -> str:
        moment = datetime.now(timezone.utc) + timedelta(milliseconds=self.ms)
        offset = OFFSETS.get(self.suffix)
        if offset is not None:
            moment = moment.astimezone(timezone(offset))
        return moment.replace(tzinfo=None).isoformat() + self.suffix


OFFSETS: dict[str, timedelta | None] = {
    "+00:00": timedelta(0),
    "Z": timedelta(0),
    "-00:00": timedelta(0),
    "+14:00": timedelta(hours=14),
    "-12:00": timedelta(hours=-12),
    "+05:30": timedelta(hours=5, minutes=30),
    "+0530": timedelta(hours=5, minutes=30),
    "": None,
    "+25:00": None,
    "+05:60": None,
    "-24:00": None,
    "+1:00": None,
    "UTC": None,
    " +00:00": None,
    "+00:00:30": None,
    "+00:00junk": None,
    "\x00": None,
}

JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.binary(max_size=16),
    st.text(max_size=16),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)
FIXED_OFFSET = st.builds(
    timezone,
    st.timedeltas(
        min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
    ),
)
DATETIMES = st.datetimes(timezones=st.none() | FIXED_OFFSET | st.timezones())
MISSING = object()  # no eta header at all
FUTURE = st.datetimes(min_value=datetime(2100, 1, 1), timezones=st.one_of(st.none(), FIXED_OFFSET))
VALID_OFFSETS = sorted(suffix for suffix, offset in OFFSETS.items() if offset is not None)
ETAS = st.one_of(
    st.one_of(  # readable and in the future (some due within milliseconds, as the clock goes)
        st.builds(Soon, st.integers(1, 60), st.sampled_from(VALID_OFFSETS)),
        FUTURE,  # a datetime object in the headers (kombu's JSON keeps its type)
        FUTURE.map(lambda moment: moment.isoformat()),
    ),
    st.one_of(  # anything else
        st.just(MISSING),
        JUNK,  # wrong types (and None, which means "no eta")
        st.builds(Soon, st.integers(-5000, 60), st.sampled_from(sorted(OFFSETS))),
        DATETIMES,
        DATETIMES.map(lambda moment: moment.isoformat()),
        st.text(alphabet="0123456789-:T.+Z ", max_size=32),  # nearly ISO 8601
        st.sampled_from(
            [
                "",
                "next tuesday",
                "2030-02-30T00:00:00",
                "9999-12-31T23:59:59-23:59",
                "0001-01-01T00:00:00+14:00",
                "2030-01-01T24:00:00",
                "NaN",
                "inf",
            ]
        ),
    ),
)
TASK_IDS = st.one_of(
    st.none(),
    st.text(max_size=24),
    st.integers(),
    st.sampled_from(
        [
            "",
            " ",
            "a b",
            "tâche",
            "\x00",
            "\n",
            "fifteen-chars-x",
            "12:",
            "ÿ1:x",
            str(uuid.UUID(int=7)),
            str(uuid.UUID(int=7)).upper(),
            "é" * 20_000,
        ]
    ),
)
QUEUES = st.one_of(
    st.text(max_size=16),
    st.sampled_from(
        ["", " ", "{", "}{", "a{b}c", f"default{SEP}3", "é" * 300, "q" * 5000, "\ud800"]
    ),
)
PRIORITIES = st.one_of(
    st.none(),
    st.integers(-5, 300),
    st.floats(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@dataclass
class Publishing:
    """The transport's channel and plain kombu's, on databases 0 and 1 of one Redis."""

    channel: Any
    plain: Any
    client: redis.Redis
    plain_client: redis.Redis
    store: DelayedStore

    def message(self, body: bytes, headers: dict[str, Any], priority: Any) -> dict[str, Any]:
        return self.channel.prepare_message(
            body, priority, "application/x-binary", "binary", headers, {}
        )


@pytest.fixture
def publishing(
    make_app: Callable[..., Celery], redis_server: RedisServer, redis_client: redis.Redis
) -> Iterator[Publishing]:
    plain_client = redis.Redis(port=redis_server.port, db=1)
    app = make_app(delayq_max_message_size=0)  # any message, whatever its size
    plain_url = redis_server.url.rsplit("/", 1)[0] + "/1"
    with app.connection_for_write() as connection, Connection(plain_url) as plain:
        with open_store(app) as store:
            yield Publishing(
                connection.default_channel,
                plain.default_channel,
                redis_client,
                plain_client,
                store,
            )
    plain_client.close()


def publish_everywhere(p: Publishing, queue: str, message: dict[str, Any]) -> str:
    """Publish through the transport and through plain kombu, deliver what the transport
    stored, and check the property. Returns what happened, for the test's statistics."""
    p.client.flushall()
    headers = message["headers"]
    eta = headers.get("eta")
    before = snapshot(p.client)
    published_at = time.time()
    try:
        p.channel.basic_publish(message, exchange="", routing_key=queue)
    except InvalidETA:
        assert snapshot(p.client) == before, "a refused message left something behind"
        assert worker_eta(eta) is None, f"refused an eta a worker reads: {eta!r}"
        return "refused: InvalidETA"
    except Exception as exc:
        # Not our clear error: acceptable only where plain kombu refuses the same message.
        assert snapshot(p.client) == before, "a refused message left something behind"
        with pytest.raises(type(exc)):
            p.plain._put(queue, copy.deepcopy(message))
        return f"refused like plain kombu: {type(exc).__name__}"

    p.plain._put(queue, copy.deepcopy(message))
    expected = lists(p.plain_client)
    ((_, (payload,)),) = expected.items()
    when = worker_eta(eta)
    if lists(p.client) == expected:
        assert not p.store.pending(), "both queued and stored"
        assert when is None or when <= time.time(), f"a future eta was not delayed: {eta!r}"
        outcome = "queued at once"
    else:
        assert not lists(p.client), "stored, and yet something was queued"
        (entry,) = p.store.pending()
        assert payload_of(entry) == payload, "stored bytes differ from plain kombu's"
        assert when is not None and when > published_at - 1
        assert due_ms_of(entry) == math.ceil(when * 1000)
        outcome, due_ms = deliver(p, entry)
        if outcome == "stored and delivered":
            delivered = lists(p.client)
            assert delivered.keys() == expected.keys(), "delivered to another list"
            ((raw,),) = delivered.values()
            as_stored, carried_due = as_scheduled(raw)
            assert as_stored == payload, "delivered bytes differ from plain kombu's"
            assert carried_due in (None, due_ms), "the due-time key is not the due time"
    assert inconsistencies(p.store) == []
    assert not p.store.pending()
    return outcome


def deliver(p: Publishing, entry: Any) -> tuple[str, int]:
    """Make a stored message due (wait, or reschedule it to now unchanged) and move it;
    what happened, and its due time when it was moved."""
    due = due_ms_of(entry)
    if due - p.store.server_time_ms() > WAIT_AT_MOST_MS:
        if not entry.task_id:  # nothing public makes a task-less message due sooner
            assert p.store.purge(entry.queue) == 1
            return "stored (far future, no task id: purged)", due
        due = 0
        assert p.store.reschedule(entry.task_id, due, lambda payload: payload) == 1
    else:  # due within milliseconds, by the clock the store goes by
        wait_until(lambda: p.store.server_time_ms() >= due, what="the message is due")
    result = p.store.move_all_due()
    assert (result.moved, result.missing) == (1, 0)
    return "stored and delivered", due


@st.composite
def envelopes(draw: st.DrawFn) -> tuple[str, bytes, dict[str, Any], Any]:
    headers: dict[str, Any] = {"task": "fuzz"}
    task_id = draw(TASK_IDS)
    if task_id is not None:
        headers["id"] = task_id
    eta = draw(ETAS)
    if eta is not MISSING:
        headers["eta"] = eta
    headers.update(draw(st.dictionaries(st.text(max_size=6), JUNK, max_size=2)))
    return draw(QUEUES), draw(st.binary(max_size=64)), headers, draw(PRIORITIES)


@FUZZ
@given(envelope=envelopes())
@pytest.mark.promise("odd-messages-refused-or-kept-whole")
def test_any_message_is_refused_clearly_or_delivered_as_plain_kombu_pushes_it(
    publishing: Publishing, envelope: tuple[str, bytes, dict[str, Any], Any]
) -> None:
    queue, body, headers, priority = envelope
    if isinstance(headers.get("eta"), Soon):
        headers["eta"] = headers["eta"].render()
    message = publishing.message(body, headers, priority)
    event(publish_everywhere(publishing, queue, message))


@pytest.mark.parametrize(
    "task_id",
    ["\ud800", "a\udfffb"],
    ids=["lone surrogate", "surrogate inside"],
)
def test_a_task_id_with_lone_surrogates_is_handled_as_plain_kombu_handles_it(
    publishing: Publishing, task_id: str
) -> None:
    """kombu's JSON escapes lone surrogates, so plain kombu queues such a message."""
    eta = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    message = publishing.message(b"x", {"id": task_id, "eta": eta}, None)
    assert publish_everywhere(publishing, "default", message) == "stored and delivered"


@pytest.mark.parametrize("megabytes", [1, 6])
@pytest.mark.promise("odd-messages-refused-or-kept-whole")
def test_a_body_of_several_megabytes_is_delivered_byte_for_byte(
    publishing: Publishing, megabytes: int
) -> None:
    body = bytes(range(256)) * (megabytes * 4096)
    eta = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    message = publishing.message(body, {"id": "huge", "eta": eta}, 5)
    assert publish_everywhere(publishing, "default", message) == "stored and delivered"


@pytest.mark.promise("odd-messages-refused-or-kept-whole")
def test_a_payload_at_redis_bulk_limit_is_refused_and_leaves_nothing_behind(
    make_app: Callable[..., Celery],
) -> None:
    """Redis's smallest ``proto-max-bulk-len`` (1 MB) stands in for the default 512 MB:
    plain kombu pushes a payload of exactly that size, the store's record is a byte longer.
    """
    limit = 1 << 20
    with RedisServer("--proto-max-bulk-len", str(limit)) as server:
        client = server.client()
        app = make_app(url=server.url, delayq_max_message_size=0)
        eta = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        with app.connection_for_write() as connection, Connection(server.url) as plain:
            channel = connection.default_channel
            message = channel.prepare_message(
                "x" * (limit // 2), None, "text/plain", "utf-8", {"id": "big", "eta": eta}, {}
            )
            message["headers"]["pad"] = ""
            channel._inplace_augment_message(message, "", "default")
            message["headers"]["pad"] = "p" * (limit - len(dumps(message)))  # ASCII: 1 B each
            plain.default_channel._put("plain", copy.deepcopy(message))
            assert client.llen("plain") == 1  # plain kombu's LPUSH fits

            # Redis answers "Protocol error: invalid bulk length" and closes the connection.
            # Whether redis-py reads that answer, or finds the connection closed while it
            # still sends the rest of the payload, depends on socket timing.
            with pytest.raises((redis.ConnectionError, redis.ResponseError)) as refused:
                channel._put("default", message)
            if isinstance(refused.value, redis.ResponseError):
                assert "invalid bulk length" in str(refused.value)

        assert set(client.keys("*")) == {b"plain"}, "the refused message left something behind"
        with open_store(app) as store:
            assert store.backlog() == [] and inconsistencies(store) == []


def test_several_big_messages_are_all_delivered_by_one_move_all_due(publishing: Publishing) -> None:
    p = publishing
    p.client.flushall()
    eta = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    bodies = [bytes([i]) * (700 * 1024) for i in range(5)]
    for body in bodies:
        p.channel.basic_publish(
            p.message(body, {"id": "big", "eta": eta}, None), exchange="", routing_key="default"
        )
    assert p.store.reschedule("big", 0, lambda payload: payload) == 5

    assert p.store.move_all_due().moved == 5
    delivered = lists(p.client)[b"default"]  # one due time: in no particular order
    assert sorted(p.channel.decode_body(loads(m)["body"], "base64") for m in delivered) == bodies
    assert inconsistencies(p.store) == []


def test_a_broadcast_message_with_a_future_eta_is_published_at_once_not_stored(
    publishing: Publishing,
) -> None:
    p = publishing
    p.client.flushall()
    exchange = Exchange("broadcast", type="fanout")
    exchange.declare(channel=p.channel)
    listener = p.client.pubsub(ignore_subscribe_messages=True)
    listener.psubscribe("*broadcast*")
    eta = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
    message = p.message(b"to all", {"id": "b1", "eta": eta}, None)

    p.channel.basic_publish(message, exchange="broadcast", routing_key="")

    received = wait_until(lambda: listener.get_message(timeout=0.1), timeout=5)
    listener.close()
    assert loads(received["data"])["headers"]["eta"] == eta
    assert not p.store.pending()
    assert not lists(p.client)


# -- the store itself: the mover never reads payloads ---------------------------------------

STORE_PAYLOADS = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(
        [
            b"",
            b":",
            b"0:",
            b"12:abc",
            b"d3:abc:x",
            b"123",
            b"\xff" * 9,
            b'{"headers": {"eta": "not a time"}}',
            b"\x00" * 40,
            b"-1:x",
        ]
    ),
)
NAMES = st.text(st.characters(codec="utf-8"), max_size=20)


@pytest.fixture
def store(make_app: Callable[..., Celery], redis_client: redis.Redis) -> Iterator[DelayedStore]:
    with open_store(make_app(delayq_move_batch_size=2)) as opened:
        yield opened


@FUZZ
@given(
    payload=STORE_PAYLOADS,
    queue=NAMES,
    destination=NAMES.map(lambda name: f"dest {name}"),  # not one of the store's own keys
    task_id=st.none() | NAMES,
    message_id=st.uuids().map(str) | NAMES,
    offset=st.integers(-100_000, 0),
)
@pytest.mark.promise("odd-messages-refused-or-kept-whole")
def test_the_mover_delivers_any_payload_byte_for_byte_without_reading_it(
    store: DelayedStore,
    redis_client: redis.Redis,
    payload: bytes,
    queue: str,
    destination: str,
    task_id: str | None,
    message_id: str,
    offset: int,
) -> None:
    redis_client.flushall()
    due = store.server_time_ms() + offset
    store.schedule(
        Scheduled(
            queue=queue,
            message_id=message_id,
            task_id=task_id,
            due_ms=due,
            destination=destination,
            payload=payload,
        )
    )
    (entry,) = store.pending()
    assert (payload_of(entry), due_ms_of(entry), entry.queue) == (payload, due, queue)
    assert entry.task_id == (task_id or "")
    assert inconsistencies(store) == []

    result = store.move_all_due()

    assert (result.moved, result.missing) == (1, 0)
    assert lists(redis_client) == {destination.encode(): [payload]}
    assert not store.pending()
    assert inconsistencies(store) == []


@FUZZ
@given(
    payloads=st.lists(STORE_PAYLOADS, min_size=1, max_size=6),
    queue=NAMES,
    task_id=NAMES.filter(bool),
)
def test_a_task_with_odd_payloads_is_found_and_cancelled_whole(
    store: DelayedStore, redis_client: redis.Redis, payloads: list[bytes], queue: str, task_id: str
) -> None:
    redis_client.flushall()
    due = store.server_time_ms() + 3_600_000
    for payload in payloads:
        store.schedule(
            Scheduled(
                queue=queue,
                message_id=str(uuid.uuid4()),
                task_id=task_id,
                due_ms=due,
                destination=queue,
                payload=payload,
            )
        )
    assert sorted(payload_of(m) for m in store.find(task_id)) == sorted(payloads)
    assert inconsistencies(store) == []

    assert store.cancel(task_id) == len(payloads)

    assert not store.pending()
    assert store.move_all_due().moved == 0
    assert not lists(redis_client)
    assert inconsistencies(store) == []


@pytest.mark.parametrize("length", range(1, 17))
def test_every_message_of_a_task_id_of_any_length_is_tracked_until_delivered(
    store: DelayedStore, redis_client: redis.Redis, length: int
) -> None:
    """Twelve messages of one task id (publish retries, say); every length of id is tried,
    since ids are packed by length."""
    task_id = string.ascii_letters[:length]
    redis_client.flushall()
    due = store.server_time_ms() + 3_600_000
    payloads = sorted(b"message %d" % i for i in range(12))
    for payload in payloads:
        store.schedule(
            Scheduled(
                queue="q",
                message_id=str(uuid.uuid4()),
                task_id=task_id,
                due_ms=due,
                destination="q",
                payload=payload,
            )
        )
    assert [m.task_id for m in store.pending()] == [task_id] * 12
    assert sorted(payload_of(m) for m in store.find(task_id)) == payloads
    assert inconsistencies(store) == []

    assert store.reschedule(task_id, 0, lambda payload: payload) == 12
    assert store.move_all_due().moved == 12

    assert sorted(lists(redis_client)[b"q"]) == payloads
    assert store.find(task_id) == []
    assert inconsistencies(store) == []


@pytest.mark.parametrize("length", [1, 14, 15, 16, 36])
def test_a_message_without_a_task_id_never_shows_one_whatever_its_delivery_tag(
    store: DelayedStore, redis_client: redis.Redis, length: int
) -> None:
    redis_client.flushall()
    due = store.server_time_ms() + 3_600_000
    store.schedule(
        Scheduled(
            queue="q",
            message_id="t" * length,
            task_id=None,
            due_ms=due,
            destination="q",
            payload=b"no task id",
        )
    )
    (entry,) = store.pending()
    assert entry.task_id == ""


@pytest.mark.promise("failed-move-writes-nothing")
def test_a_move_failing_on_a_destination_that_is_not_a_list_loses_nothing_and_blocks_nothing(
    store: DelayedStore, redis_client: redis.Redis
) -> None:
    """Some other program holds a string under a destination list's name, so the LPUSH inside
    the move script fails; Redis does not undo the script's earlier writes."""
    redis_client.flushall()
    now = store.server_time_ms()
    for queue, destination, payload in [
        ("q", "q", b"first"),
        ("q", f"q{SEP}9", b"second"),
        ("z", "z", b"other queue"),
    ]:
        store.schedule(
            Scheduled(
                queue=queue,
                message_id=str(uuid.uuid4()),
                task_id=payload.decode(),
                due_ms=now - 10,
                destination=destination,
                payload=payload,
            )
        )
    redis_client.set(f"q{SEP}9", "not a list")

    for _ in range(2):  # as a mover retries
        with contextlib.suppress(redis.ResponseError):
            store.move_all_due()

    assert inconsistencies(store) == []
    still_pending = [payload_of(m) for m in store.pending(queue="q")]
    assert sorted(lists(redis_client).get(b"q", []) + still_pending) == [b"first", b"second"]
    assert lists(redis_client).get(b"z") == [b"other queue"], "another queue was held up"

    redis_client.delete(f"q{SEP}9")
    store.move_all_due()
    delivered = [payload for values in lists(redis_client).values() for payload in values]
    assert sorted(delivered) == [b"first", b"other queue", b"second"]
