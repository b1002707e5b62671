"""Big and oddly shaped messages on the atomic consume path (brokers/redis/lua/consume.lua),
on a real Redis: of a message bigger than 16 KiB, the script decodes the envelope's
"properties" and never its body, so taking a message costs Redis the same work at any body
size beyond copying it; and a message crafted so that the script's skim might read it
otherwise than kombu's full parse is delivered under the tag kombu reads, or
dead-lettered, never lost nor recorded twice (the crafted ones carry a pad, so that they
are skimmed, not decoded whole).

Why the cost is asserted structurally, not with a clock: what grows with a body is what
Redis does with it. Copying it is the least any one-step take does (benchmarks.consume_big
measures that floor beside the script, and on a shared machine both vary by a factor of
two from run to run); decoding it is what the script gave up. A body that Redis's JSON
decoder refuses and Python's reads (a lone surrogate escape) tells the two apart without
timing anything: a script that decodes the body cannot take it, one that skims it can.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from celery_delayq.brokers.redis.replies import Taken

from ...helpers import channel_of, drain
from .test_consume_adversarial import (
    LONG,
    consuming,
    dead_payloads,
    envelope,
    tagged,
    with_raw,
)

pytestmark = [pytest.mark.integration, pytest.mark.promise("consume-reads-no-body")]

#: The delivery tag of the well-formed message pushed after the crafted ones.
LAST = "last-message"
#: A body only Python reads: Redis's cjson refuses a lone surrogate escape.
SURROGATE = b"\\ud800"
#: A pair that makes a message bigger than the most the script decodes whole (16 KiB).
PAD = ("pad", b'"' + b"p" * 20_000 + b'"')


def plain(payload: dict[str, Any]) -> dict[str, Any]:
    """The envelope with a body kombu hands over as it is (no base64 to decode): a JSON
    object here, which kombu does not encode either (a lone surrogate in a string body
    fails kombu's encoding of it, on kombu's path as on ours)."""
    properties = {k: v for k, v in payload["properties"].items() if k != "body_encoding"}
    return {**payload, "properties": properties}


def pairs(*items: tuple[str, bytes]) -> bytes:
    """A JSON object written pair by pair, keys and values raw (escapes, duplicate keys,
    any order), and PAD last: too big to be decoded whole."""
    written = [b'"' + k.encode() + b'": ' + v for k, v in (*items, PAD)]
    return b"{" + b", ".join(written) + b"}"


def part(payload: dict[str, Any], name: str) -> bytes:
    return json.dumps(payload[name]).encode()


def take_all(app: Any, redis_client: Any, messages: list[bytes], how: str) -> list[Any]:
    """Push ``messages`` and a well-formed last one, and take them all through our channel
    (``consume``: the event loop; ``get``: basic_get); the messages delivered, checking on
    the way that every one was delivered or dead-lettered, and that what is recorded is
    exactly what was delivered, under the tags kombu reads."""
    last = json.dumps(tagged(envelope(app), LAST)).encode()
    redis_client.lpush("q", *messages, last)
    with channel_of(app, visibility_timeout=LONG) as channel:
        if how == "get":
            received = []
            while redis_client.llen("q"):
                got = channel.basic_get("q", no_ack=False)
                received += [got] if got is not None else []
        else:
            with consuming(channel, "q") as received:
                while not any(m.delivery_tag == LAST for m in received):
                    assert drain(channel), "the last message never came"
        dead = [payload for payload, _ in dead_payloads(app)]
        assert redis_client.llen("q") == 0
        assert len(received) + len(dead) == len(messages) + 1  # none lost
        assert not Counter(dead) - Counter(messages)
        entries = {  # recorded under the tags kombu read, once each
            bytes_to_str(tag): loads(bytes_to_str(entry))
            for tag, entry in redis_client.hgetall("unacked").items()
        }
        assert set(entries) == {m.delivery_tag for m in received}
        for entry in entries.values():  # kombu's, naming the queue it came from
            assert entry[1:] == ["", "q"]
        with redis_client.pipeline() as pipe:  # kombu's restore of each entry works
            for entry in entries.values():
                channel._do_restore_message(*entry, pipe)
            pipe.execute()
    return [m for m in received if m.delivery_tag != LAST]


def stock_tag(redis_server: Any, redis_client: Any, message: bytes) -> str:
    """The delivery tag stock kombu delivers ``message`` under (the reference)."""
    redis_client.lpush("stock", message)
    with channel_of(redis_server.url, visibility_timeout=LONG) as channel:
        with consuming(channel, "stock") as received:
            assert drain(channel)
            received[0].ack()  # not restored when the channel closes
    return str(received[0].delivery_tag)


@pytest.mark.parametrize("how", ["consume", "get"])
@pytest.mark.parametrize("size", [20_000, 4_000_000])
def test_the_script_never_decodes_a_big_messages_body_so_one_only_python_reads_is_delivered(
    how, size, app, redis_client
) -> None:
    """The regression test of the cost (see the module): before, the script decoded the
    whole message, refused this one as "not JSON" and dead-lettered it."""
    good = {**plain(envelope(app)), "body": "b" * 20_000}
    body = b'{"data": "' + b"x" * size + b'", "note": "' + SURROGATE + b'"}'
    header = with_raw(tagged(good, "in-a-header"), ("headers", "note"), b'"' + SURROGATE + b'"')
    messages = [with_raw(tagged(good, "in-the-body"), ("body",), body), header]
    delivered = take_all(app, redis_client, messages, how)
    assert [m.delivery_tag for m in delivered] == ["in-the-body", "in-a-header"]
    assert dead_payloads(app) == []


def crafted_shapes(good: dict[str, Any]) -> dict[str, bytes]:
    """Messages whose envelope a partial parse could misread, each with the one tag
    Python's full parse reads in it ("real" unless its name says otherwise)."""
    real = tagged(good, "real")
    decoy = part(tagged(good, "decoy"), "properties")
    body, headers, properties = (part(real, name) for name in ("body", "headers", "properties"))
    quoted = json.dumps('"properties": ' + decoy.decode() + "}, ").encode()
    return {
        "properties first, body last": pairs(
            ("properties", properties), ("headers", headers), ("body", body)
        ),
        "a decoy inside the headers": pairs(
            ("body", body),
            ("headers", b'{"properties": ' + decoy + b', "x": ["}", "{"]}'),
            ("properties", properties),
        ),
        "a decoy inside the body string": pairs(
            ("body", quoted), ("headers", headers), ("properties", properties)
        ),
        "a decoy first, the real properties last": pairs(
            ("properties", decoy), ("body", body), ("properties", properties)
        ),
        "decoy: the real properties first, a decoy last": pairs(
            ("properties", properties), ("body", body), ("properties", decoy)
        ),
        "an escaped key after a plain one": pairs(
            ("body", body), ("properties", decoy), ("prop\\u0065rties", properties)
        ),
        "a key all escapes": pairs(
            ("body", body),
            ("properties", decoy),
            ("".join(f"\\u{ord(c):04x}" for c in "properties"), properties),
        ),
        "a body ending in an even run of backslashes": pairs(
            ("body", b'"abc\\\\\\\\"'), ("properties", properties)
        ),
        "a body with an escaped quote after backslashes": pairs(
            ("body", b'"\\\\\\"properties\\\\\\": {}"'), ("properties", properties)
        ),
        "indented, as json.dumps(indent=4) writes": json.dumps(real, indent=4).encode(),
        "a decoy nested in the properties": pairs(
            ("body", body),
            ("properties", properties[:-1] + b', "x": {"properties": ' + decoy + b"}}"),
        ),
        # beyond what the skim follows (it reads them whole, as before)
        "a body of 20,000 escaped quotes": pairs(
            ("body", b'"' + b'\\"' * 20_000 + b'"'), ("properties", properties)
        ),
        "a headers value of 50,000 numbers": pairs(
            ("headers", b'{"n": [' + b"1, " * 50_000 + b"1]}"), ("properties", properties)
        ),
        "100,000 spaces before the properties": pairs(
            ("body", body), ("properties", b" " * 100_000 + properties)
        ),
        "deep nesting in the headers": pairs(
            ("headers", b'{"n": ' + b"[" * 900 + b"]" * 900 + b"}"), ("properties", properties)
        ),
    }


@pytest.mark.parametrize("how", ["consume", "get"])
@pytest.mark.promise("poison-dead-lettered")
def test_a_message_crafted_against_the_skim_is_delivered_under_the_tag_kombu_reads(
    how, app, redis_server, redis_client
) -> None:
    """Decoys in nested values and strings, duplicate and escaped keys, unusual order,
    backslash runs, and shapes too dense to skim: each is delivered once, recorded under
    the tag stock kombu delivers it under, and nothing else is recorded."""
    shapes = crafted_shapes(plain(envelope(app)))  # string bodies that are not base64
    expected = {name: "decoy" if name.startswith("decoy") else "real" for name in shapes}
    for name, message in shapes.items():
        assert stock_tag(redis_server, redis_client, message) == expected[name], name
        delivered = take_all(app, redis_client, [message], how)
        assert [m.delivery_tag for m in delivered] == [expected[name]], name
        assert dead_payloads(app) == [], name
        redis_client.flushdb()


def broken_shapes(good: dict[str, Any]) -> dict[str, bytes]:
    """JSON that Python refuses, which the skim, checking structure and not every token,
    may pass: the script records it, the consumer dead-letters it and drops its entry."""
    real = tagged(good, "real")
    body, properties = part(real, "body"), part(real, "properties")
    return {
        "a trailing comma": pairs(("body", body), ("properties", properties))[:-1] + b",}",
        "a bad escape in the body": pairs(("body", b'"\\q"'), ("properties", properties)),
        "brackets that do not match in the headers": pairs(
            ("headers", b'{"a": [1}}'), ("properties", properties)
        ),
        "a number Python cannot read": pairs(("x", b"1.2.3"), ("properties", properties)),
        "more after the object": pairs(("body", body), ("properties", properties)) + b" x",
        "a missing comma": pairs(("body", body), ("properties", properties)).replace(
            b", ", b" ", 1
        ),
    }


@pytest.mark.parametrize("how", ["consume", "get"])
@pytest.mark.promise("poison-dead-lettered")
def test_json_only_the_skim_passes_is_dead_lettered_and_not_left_recorded(
    how, app, redis_client
) -> None:
    broken = list(broken_shapes(envelope(app)).values())
    assert take_all(app, redis_client, broken, how) == []
    assert Counter(payload for payload, _ in dead_payloads(app)) == Counter(broken)


@pytest.mark.promise("poison-dead-lettered")
def test_a_message_recorded_under_another_tag_than_python_reads_is_dead_lettered(
    app, redis_client
) -> None:
    """Should the script ever read another delivery tag than Python (none of the shapes
    above does), kombu would ack the tag Python reads and the entry the script wrote
    would come back to run again: the consumer dead-letters the message and drops that
    entry instead of delivering it."""
    message = json.dumps(tagged(envelope(app), "python-reads-this")).encode()
    redis_client.hset("unacked", "redis-read-this", b"[" + message + b', "", "q"]')
    redis_client.zadd("unacked_index", {"redis-read-this": 1})
    with channel_of(app, visibility_timeout=LONG) as channel, consuming(channel, "q") as received:
        taken = Taken(message, "redis-read-this", "")
        assert not channel.consumer.deliver_taken("q", "q", "q", taken)
        assert received == [] and "redis-read-this" not in channel.consumer.recorded_tags
    ((payload, reason),) = dead_payloads(app)
    assert payload == message and "delivery tag reads differently" in reason
    assert redis_client.hlen("unacked") == 0 and redis_client.zcard("unacked_index") == 0


def dense(payload: dict[str, Any], count: int = 60_000, note: bytes = b'"x"') -> bytes:
    """The envelope with ``count`` numbers in its headers (more than the script's skim
    follows, and too big for it to read whole) and ``note`` beside them."""
    numbers = b"[" + b"1, " * count + b"1]"
    headers = {**payload["headers"], "n": "\x00N\x00", "note": "\x00NOTE\x00"}
    raw = json.dumps({**payload, "headers": headers}).encode()
    return raw.replace(b'"\\u0000N\\u0000"', numbers).replace(b'"\\u0000NOTE\\u0000"', note)


def beside_dense(payload: dict[str, Any], count: int = 60_000) -> bytes:
    """The envelope with ``count`` numbers in a top-level value of its own, before the
    rest: more than the script's skim follows, whatever the headers hold."""
    numbers = b'{"n": [' + b"1, " * count + b"1], "
    return numbers + json.dumps(payload).encode()[1:]


@pytest.mark.parametrize("how", ["consume", "get"])
def test_a_big_message_too_dense_to_skim_is_named_by_the_consumer_not_decoded_by_redis(
    how, app, redis_client
) -> None:
    """Its entry is written under a tag of the consumer's own, then renamed to the tag
    kombu reads: the surrogate beside the numbers, which Redis's decoder refuses, shows
    Redis never decoded it. So are properties too big to decode in Redis's budget."""
    good = envelope(app)
    long_string = b'"' + b"z" * 100_000 + SURROGATE + b'"'
    messages = [
        dense(tagged(good, "dense"), note=b'"' + SURROGATE + b'"'),
        with_raw(tagged(good, "big-properties"), ("properties", "x"), long_string),
    ]
    delivered = take_all(app, redis_client, messages, how)
    assert [m.delivery_tag for m in delivered] == ["dense", "big-properties"]
    assert dead_payloads(app) == []


@pytest.mark.parametrize("how", ["consume", "get"])
def test_a_big_message_too_dense_to_skim_that_cannot_be_taken_is_dead_lettered(
    how, app, redis_client
) -> None:
    good = envelope(app)
    hostile = [
        b"not json " * 10_000,
        dense(tagged(good, [1])),  # type: ignore[arg-type]
        dense(tagged(good, "\u00e9")),
        dense({**good, "properties": {**good["properties"], "priority": float("inf")}}),
        # present but null: kombu's restore writes "redelivered" into both, and fails
        beside_dense({**tagged(good, "null-headers"), "headers": None}),
        beside_dense(
            tagged(
                {**good, "properties": {**good["properties"], "delivery_info": None}}, "null-info"
            )
        ),
    ]
    assert take_all(app, redis_client, hostile, how) == []
    assert Counter(payload for payload, _ in dead_payloads(app)) == Counter(hostile)


def test_a_consumer_gone_before_it_named_the_entry_loses_nothing(
    app, redis_server, redis_client
) -> None:
    """The entry under the consumer's own tag is kombu's, naming the queue: any restore
    (stock kombu's here) puts the message back, and it is delivered under its tag."""
    message = dense(tagged(envelope(app), "dense"))
    redis_client.lpush("q", message)
    with channel_of(app) as channel:  # takes it, then dies before naming it
        keys, args = channel.consumer.consume_call([("q", "q")])
        reply = channel.consumer.scripts.consume(keys, args)
        assert reply[2] == args[1].encode() and redis_client.hkeys("unacked") == [reply[2]]
        redis_client.zadd("unacked_index", {args[1]: 1})  # long ago: due for a restore
        channel.consumer.recorded_tags.clear()
    with channel_of(redis_server.url) as stock:
        stock.qos.restore_visible(num=10, interval=1)
    assert redis_client.llen("q") == 1 and redis_client.hlen("unacked") == 0
    restored = redis_client.rpop("q")  # kombu's restore marks it redelivered
    (delivered,) = take_all(app, redis_client, [restored], "consume")
    assert delivered.delivery_tag == "dense"


# -- fuzz: envelopes written pair by pair, against Python's reading of them --

PRINTABLE = st.characters(min_codepoint=32, max_codepoint=126)
#: Strings that make a skim work: quotes, backslashes, brackets, and decoy keys.
tricky_text = st.text(alphabet='\\"{}[],: prtiesdlvy_ag\u00e9\n', max_size=12)
decoys = st.fixed_dictionaries({"delivery_tag": st.text(PRINTABLE, min_size=1, max_size=6)})
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | tricky_text | decoys,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["properties", "headers", "a"]) | tricky_text, children)
    ),
    max_leaves=8,
)
real_properties = st.fixed_dictionaries(
    {"delivery_tag": st.text(PRINTABLE, min_size=1, max_size=8)},
    optional={
        "delivery_info": st.just({"exchange": "", "routing_key": "q"}) | json_values,
        "priority": st.integers(0, 9),
    },
)
#: Top-level keys, some spelled with escapes, some near misses.
top_keys = st.sampled_from(
    ["body", "headers", "properties", "prop\\u0065rties", "propertie", "x", "properties "]
)
#: What makes a message big: nothing, a long string (skimmed), dense numbers (not).
pads = st.sampled_from([b"", b'"' + b"y" * 20_000 + b'"', b"[" + b"1," * 10_000 + b"1]"])
envelopes = st.tuples(
    st.lists(
        st.tuples(top_keys, real_properties.map(json.dumps) | json_values.map(json.dumps)),
        min_size=1,
        max_size=5,
    ),
    pads,
    st.sampled_from([", ", ",", " ,\n  "]),
)


def built(pairs_: list[tuple[str, str]], pad: bytes, comma: str) -> bytes:
    items = [b'"' + k.encode() + b'": ' + v.encode() for k, v in pairs_]
    if pad:
        items.insert(len(items) // 2, b'"pad": ' + pad)
    return b"{" + comma.encode().join(items) + b"}"


def tag_kombu_reads(message: bytes) -> str | None:
    """The tag the message is delivered under, from Python's reading of it: None where it
    is dead-lettered (no string tag of printable ASCII, or headers or delivery info that
    are present but not objects: kombu's restore of it would fail)."""
    payload = json.loads(message)
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        return None
    tag = properties.get("delivery_tag")
    parts = payload.get("headers", {}), properties.get("delivery_info", {})
    if not isinstance(tag, str) or not tag or not all(isinstance(p, dict) for p in parts):
        return None
    return tag if all(" " <= c <= "~" for c in tag) else None


@settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(envelope_parts=envelopes)
def test_fuzz_a_message_is_delivered_under_the_tag_python_reads_or_dead_lettered(
    envelope_parts: tuple[list[tuple[str, str]], bytes, str], make_app, redis_client
) -> None:
    redis_client.flushdb()
    app = make_app()
    message = built(*envelope_parts)
    expected = tag_kombu_reads(message)
    delivered = take_all(app, redis_client, [message], "consume")
    assert [m.delivery_tag for m in delivered] == ([expected] if expected else [])
    assert [payload for payload, _ in dead_payloads(app)] == ([] if expected else [message])
