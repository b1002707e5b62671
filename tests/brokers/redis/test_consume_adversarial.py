"""Hostile messages on a queue list, consumed atomically (brokers/redis/consume.py and
brokers/redis/lua/consume.lua) on a real Redis: through a kombu channel, and by a real worker.

The property, for every message: it is delivered (and recorded as unacknowledged), or it
is in the dead letters of its queue with the reason; never in neither place, and no
exception ever escapes the consumer. A message kombu's own path can deliver is delivered.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery import Celery
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kombu import Consumer, Exchange, Queue
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from celery_delayq.ops import api
from celery_delayq.testing import wait_until

from ...helpers import celery_process, channel_of, drain, invoke, remember, runs
from .test_consume import publish

pytestmark = pytest.mark.adversarial

#: Seconds a taken message stays taken where no restore is wanted.
LONG = 600
#: A JSON token Redis's cjson reads as infinity and cannot write back (finding 1).
HUGE = b"1e400"


def envelope(app: Celery, queue: str = "q", body: Any = None) -> dict[str, Any]:
    """A kombu envelope as the transport publishes it (taken back off its list)."""
    client = redis.Redis.from_url(app.conf.broker_url)
    with channel_of(app) as channel:
        publish(channel, queue, body or {"n": 1})
    raw = client.rpop(queue)
    client.close()
    assert raw is not None
    return loads(raw)  # type: ignore[no-any-return]


def with_raw(payload: dict[str, Any], path: tuple[str, ...], token: bytes | None) -> bytes:
    """``payload`` as JSON, with the value at ``path`` replaced by the raw JSON ``token``
    (removed when None), or the whole message replaced when ``path`` is empty."""
    if not path:
        return token or b""
    payload = json.loads(json.dumps(payload))
    parent = payload
    for part in path[:-1]:
        if not isinstance(parent.get(part), dict):
            parent[part] = {}
        parent = parent[part]
    if token is None:
        parent.pop(path[-1], None)
        return json.dumps(payload).encode()
    parent[path[-1]] = "\x00TOKEN\x00"
    return json.dumps(payload).encode().replace(b'"\\u0000TOKEN\\u0000"', token)


def tagged(payload: dict[str, Any], tag: str) -> dict[str, Any]:
    """The envelope with another delivery tag (each message its own, as kombu's)."""
    return {**payload, "properties": {**payload["properties"], "delivery_tag": tag}}


def crafted(payload: dict[str, Any]) -> bytes:
    """Finding 1's message: ``"delivery_info": {"exchange": 1e400, ...}``."""
    return with_raw(payload, ("properties", "delivery_info", "exchange"), HUGE)


@contextmanager
def consuming(channel: Any, queue: str) -> Iterator[list[Any]]:
    """A kombu consumer on ``queue`` that keeps the raw messages it receives (no body
    decoding: that is the consumer's business, Celery's in a worker)."""
    received: list[Any] = []
    with Consumer(channel, [Queue(queue, Exchange(queue), queue)], on_message=received.append):
        yield received


def dead_payloads(app: Celery) -> list[tuple[bytes, str]]:
    return [(letter.record.payload, letter.reason) for letter in api.dead_letters(app)]


@pytest.mark.promise("odd-delivery-info-delivered")
def test_the_crafted_message_is_delivered_and_recorded_to_come_back_to_its_queue(
    app, redis_server, redis_client
) -> None:
    """kombu's own path delivers it, so ours does; its entry (whose exchange Redis cannot
    write) names the default exchange and the queue, so a restore (stock kombu's here)
    puts it back in the queue it came from."""
    message = crafted(envelope(app))
    redis_client.lpush("q", message)
    with channel_of(app) as channel, consuming(channel, "q") as received:
        assert drain(channel)
        (delivered,) = received
        assert delivered.delivery_info["exchange"] == float("inf")
        entry = loads(redis_client.hget("unacked", delivered.delivery_tag))
        assert entry[1:] == ["", "q"] and entry[0] == delivered._raw
        assert redis_client.llen("q") == 0 and dead_payloads(app) == []
    with channel_of(redis_server.url) as stock:
        wait_until(lambda: stock.qos.restore_visible(num=10, interval=1) or redis_client.llen("q"))
    assert redis_client.hlen("unacked") == 0
    assert loads(redis_client.lindex("q", 0))["properties"]["delivery_tag"] == (
        delivered.delivery_tag
    )


#: JSON that kombu's JSON decoder turns into an object, and fails on (TypeError).
KOMBU_TYPED = b'{"__type__": "datetime", "__value__": 5}'

UNREADABLE = {
    b"not json": "not JSON",
    b"[1, 2]": '"properties"',
    b'{"body": "x"}': '"properties"',
    b'{"properties": {"delivery_tag": 7}}': '"delivery_tag"',
    b"[" * 2000 + b"]" * 2000: "not JSON",
}


@pytest.mark.parametrize("how", ["consume", "get"])
@pytest.mark.promise("poison-dead-lettered", "poison-reason-and-resend")
def test_unreadable_messages_go_to_the_dead_letters_and_the_next_one_is_delivered(
    how, app, redis_client
) -> None:
    good = envelope(app)
    base64_junk = with_raw(good, ("body",), b'"@@not base64@@"')  # kombu cannot read it
    control = with_raw(good, ("body",), b'"a\x01b"')  # Redis reads it, Python does not
    typed = with_raw(tagged(good, "typed"), ("headers", "eta"), KOMBU_TYPED)  # nor kombu's
    hostile = [*UNREADABLE, base64_junk, control, typed]
    redis_client.lpush("q", *hostile, json.dumps(good))
    with channel_of(app, visibility_timeout=LONG) as channel:
        if how == "get":
            got = Queue("q")(channel).get(no_ack=False)
            while got is None and redis_client.llen("q"):
                got = Queue("q")(channel).get(no_ack=False)
            delivered = [got]
        else:
            with consuming(channel, "q") as delivered:
                assert drain(channel)
        assert [m.payload for m in delivered] == [{"n": 1}]
        assert redis_client.llen("q") == 0
        assert redis_client.hkeys("unacked") == [delivered[0].delivery_tag.encode()]
        dead = dead_payloads(app)
        assert Counter(payload for payload, _ in dead) == Counter(hostile)
        reasons = dict(dead)
        for message, why in UNREADABLE.items():
            assert why in reasons[message]
        assert "kombu cannot read it" in reasons[base64_junk]
        assert "not JSON kombu reads" in reasons[control]
        assert "TypeError" in reasons[typed]
    letters = invoke(app, "list", "--dead")
    assert letters.exit_code == 0 and "not JSON" in letters.output


@pytest.mark.promise("poison-reason-and-resend")
def test_a_dead_letter_resent_goes_back_to_its_queue(app, redis_client) -> None:
    redis_client.lpush("q", b"not json")
    with channel_of(app) as channel, consuming(channel, "q") as received:
        assert not drain(channel, timeout=0.3)
    assert received == [] and len(dead_payloads(app)) == 1
    assert api.resend_dead(app) == 1
    assert redis_client.lrange("q", 0, -1) == [b"not json"] and dead_payloads(app) == []


@pytest.mark.promise("poison-dead-lettered")
def test_with_a_store_apart_the_dead_letters_are_there(
    make_app, store_server, store_client, redis_client
) -> None:
    app = make_app(delayq_store_url=store_server.url)
    redis_client.lpush("q", b"not json", json.dumps(envelope(app)))
    with channel_of(app, visibility_timeout=LONG) as channel, consuming(channel, "q") as received:
        assert drain(channel)
        assert len(received) == 1 and redis_client.llen("q") == 0
        assert dead_payloads(app) == [(b"not json", "not JSON")]
    assert not redis_client.keys("delayq*") and store_client.keys("delayq*")


# -- fuzz: hostile envelopes pushed straight onto the queue list --

#: Where a hostile value goes: () is the whole message.
PATHS: list[tuple[str, ...]] = [
    (),
    ("properties",),
    ("properties", "delivery_tag"),
    ("properties", "delivery_info"),
    ("properties", "delivery_info", "exchange"),
    ("properties", "delivery_info", "routing_key"),
    ("properties", "body_encoding"),
    ("properties", "priority"),
    ("body",),
    ("headers",),
    ("content-type",),
    ("content-encoding",),
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
).map(lambda value: json.dumps(value).encode())

raw_tokens = st.sampled_from(
    [
        HUGE,
        b"-1e400",
        b"NaN",
        b"Infinity",
        b"1" * 400,
        b'"\xff\xfe invalid utf-8"',
        b'"\\ud800"',
        b'"a\x00b"',
        b"[" * 1500 + b"]" * 1500,
        b'{"a":' * 900 + b"1" + b"}" * 900,
        b"",
        b"{",
        b'"' + b"x" * 5000 + b'"',
        KOMBU_TYPED,
        b'{"__type__": "bytes", "__value__": 5}',
    ]
)

#: The delivery tag of the message pushed last (no generated tag is this long).
LAST = "last-" + "0" * 32

hostile_messages = st.one_of(
    st.binary(max_size=64),
    st.tuples(st.sampled_from(PATHS), json_values | raw_tokens | st.none()),
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(hostile=st.lists(hostile_messages, min_size=1, max_size=4))
@example(hostile=[(("properties", "delivery_tag"), b'"0"')] * 2)  # one tag, two messages
@example(hostile=[(("headers",), b"[]"), (("properties", "delivery_info"), b"[1]")])
@pytest.mark.promise("poison-dead-lettered")
def test_fuzz_every_message_is_delivered_or_dead_lettered(
    hostile: list[Any], make_app, redis_client, caplog
) -> None:
    redis_client.flushdb()
    app = make_app()
    template = envelope(app, body={"template": True})
    messages = [
        m if isinstance(m, bytes) else with_raw(tagged(template, f"{LAST}-{n}"), *m)
        for n, m in enumerate(hostile)
    ]
    last = json.dumps(tagged(template, LAST)).encode()
    redis_client.lpush("q", *messages, last)
    with channel_of(app, visibility_timeout=LONG) as channel, consuming(channel, "q") as received:
        while not any(m.delivery_tag == LAST for m in received):
            assert drain(channel), "the last message never came"
        dead = [payload for payload, reason in dead_payloads(app) if reason]
        assert redis_client.llen("q") == 0
        assert len(received) + len(dead) == len(messages) + 1  # none lost
        assert not Counter(dead) - Counter(messages)  # the dead letters are the messages
        # each delivered one is recorded (under its tag: two messages a producer gave one
        # tag share an entry, as on kombu's path)
        assert set(redis_client.hkeys("unacked")) == {m.delivery_tag.encode() for m in received}
        caplog.clear()
        with redis_client.pipeline() as pipe:  # kombu's restore of each entry fails on none
            for entry in redis_client.hvals("unacked"):
                channel._do_restore_message(*loads(bytes_to_str(entry)), pipe)
            pipe.execute()
        assert "Could not restore message" not in caplog.text


# -- a real worker --

SETTINGS = {"broker_transport_options": {"visibility_timeout": 10}}


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.promise(
    "poison-dead-lettered", "poison-reason-and-resend", "crafted-input-stops-nothing"
)
def test_a_worker_lives_through_hostile_messages_and_loses_none(
    make_app, redis_server, redis_client
) -> None:
    """Finding 1 and its kin against ``celery worker``: the crafted task runs (as on
    kombu's path), what cannot be read is dead-lettered with a WARNING, and later tasks
    run on the same worker."""
    app = make_app(**SETTINGS)
    remember(app, "crafted")  # no worker yet: it waits in its list, to be rewritten
    task = loads(redis_client.rpop("default"))
    unreadable = [
        *UNREADABLE,
        with_raw(task, ("properties", "delivery_tag"), b"[1]"),
        with_raw(
            tagged(task, "b64"), ("body",), b'"@@not base64@@"'
        ),  # kombu cannot build the message
        with_raw(tagged(task, "hdr"), ("headers",), b'"x"'),  # a restore would drop it
    ]
    redis_client.lpush("default", crafted(task), *unreadable)
    with celery_process("worker", redis_server.url, SETTINGS, "-P", "solo") as worker:
        # a worker that exits (it did, before) ends each wait at once
        wait_until(lambda: runs(redis_client), timeout=30, abort=worker.exited, what="a run")
        remember(app, "after")
        wait_until(
            lambda: len(runs(redis_client)) == 2, timeout=30, abort=worker.exited, what="two runs"
        )
        worker.wait_for_output("went to the dead letters")
        assert worker.exited() is None
        assert "Unrecoverable error" not in worker.output
    assert [run["label"] for run in runs(redis_client)] == ["crafted", "after"]
    assert Counter(payload for payload, _ in dead_payloads(app)) == Counter(unreadable)
    assert "WARNING" in worker.output and "not JSON" in worker.output
    assert redis_client.llen("default") == 0 and redis_client.hlen("unacked") == 0
