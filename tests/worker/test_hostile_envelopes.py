"""Generated hostile envelopes: hypothesis gives any header, property, delivery info field
or envelope field of a Celery protocol-2 message a hostile type or depth (lists, dicts,
nesting 1000 deep, huge ints, infinities, NaN, None, booleans, bytes, decimals, kombu
typed values that do not decode), or a body that is not base64 or not JSON. One batch is
built up front (derandomized: the same batch on every run) and published raw, each
between two good tasks, to ONE real prefork ``celery worker``: on Redis (a hand-built
kombu envelope LPUSHed, as any client of the broker's Redis can, or, for every other
message kombu's producer can make, kombu's producer on celery-delayq's transport) and on
RabbitMQ (kombu's producer).

The worker lives on, every good task runs once, and every hostile message runs (or its
own time limit stops it), goes to the dead letters with a reason, or, only where Celery
discards it by design (a message that is no task message, a task name no worker knows,
an ``eta`` or ``expires`` that is no date), is logged and discarded; none is left in the
queue, and no Redis call takes 10 ms or more."""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
import re
import reprlib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kombu.utils.json import dumps

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import REMEMBER, celery_process, remember, runs
from .test_poison_messages import deep_recursion, nested, worker_settings

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(300),
    pytest.mark.slow,
    pytest.mark.promise("crafted-input-stops-nothing"),
    pytest.mark.promise("celery-poison-dead-lettered"),
]

#: Hostile messages per broker: each between two good tasks, all to one worker.
BATCH = 1000

HEADERS = (
    "id", "task", "eta", "expires", "timelimit", "retries", "stamped_headers", "stamps",
    "argsrepr", "kwargsrepr", "root_id", "parent_id", "group", "origin", "lang", "shadow",
    "ignore_result", "soft_time_limit", "replaced_task_nesting", "delayq_redeliveries",
)  # fmt: skip
#: AMQP message properties (on Redis: keys of the envelope's "properties")
PROPERTIES = ("correlation_id", "reply_to", "priority", "delivery_mode")
#: fields of the Redis envelope itself (kombu's JSON around the body), its "properties"
#: and their "delivery_info"
ENVELOPE = ("content-type", "content-encoding", "body", "properties", "headers")
ENVELOPE_PROPERTIES = ("delivery_tag", "body_encoding", "delivery_info")
DELIVERY_INFO = ("exchange", "routing_key")
#: the embedded options of the body (the third element)
BODY_EMBED = ("callbacks", "errbacks", "chord", "chain")

#: Places (where, field) hostile values go, per broker.
AMQP_PLACES = [("header", f) for f in HEADERS] + [("property", f) for f in PROPERTIES]
AMQP_PLACES += [("embed", f) for f in BODY_EMBED]
REDIS_PLACES = AMQP_PLACES + [("envelope", f) for f in ENVELOPE]
REDIS_PLACES += [("property", f) for f in ENVELOPE_PROPERTIES]
REDIS_PLACES += [("delivery_info", f) for f in DELIVERY_INFO]

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**64, -(2**63) - 1, 10**30]),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.decimals(allow_nan=False, allow_infinity=False, places=3),
    st.sampled_from(["\x00\xff", "\ud7ff", "b'\\x80'", "", " ", "{}", "[]", "null"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from(
        [
            nested(1000),
            {"a": {"b": [[{"c": None}]]}},
            [[], {}],
            ["a", {}],
            {"__type__": "datetime", "__value__": "not a date"},
            {"__type__": "bytes", "__value__": 5},
        ]
    ),
)


@dataclass(frozen=True)
class Hostile:
    """One generated hostile message: ``value`` at ``field`` of ``where``; its
    ``marker`` is its task's label (and, where the field leaves it, its task id)."""

    where: str
    field: str
    value: Any
    marker: str

    def __str__(self) -> str:
        return f"{self.where} {self.field} = {reprlib.repr(self.value)}"


def finite(value: Any) -> bool:
    """Whether ``value`` holds no infinite or NaN float, at any depth (iteratively)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def generate(
    places: list[tuple[str, str]], carried: Callable[[Hostile], bool] = lambda _: True
) -> list[Hostile]:
    """The batch: BATCH hostile messages (those the broker can carry), the same on every
    run."""
    batch: list[Hostile] = []

    @settings(
        max_examples=BATCH,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(places), hostile)
    def one(place: tuple[str, str], value: Any) -> None:
        where, field = place
        if field == "task" and isinstance(value, (str, bytes)):
            return  # a name no worker knows: Celery discards it by design
        hostile = Hostile(where, field, value, f"hostile-{uuid.uuid4().hex[:12]}")
        if carried(hostile):
            batch.append(hostile)

    one()
    return batch


def message_parts(app: Celery, hostile: Hostile) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """Headers, properties and body of a task message of remember, labelled with the
    marker, with the hostile value put in the header, property or body option."""
    message = app.amqp.create_task_message(hostile.marker, REMEMBER, (), {"label": hostile.marker})
    headers, properties, body = dict(message.headers), dict(message.properties), message.body
    if hostile.where == "header":
        headers[hostile.field] = hostile.value
    elif hostile.where == "property":
        properties[hostile.field] = hostile.value
    elif hostile.where == "embed":
        args, kwargs, embed = body
        body = (args, kwargs, {**embed, hostile.field: hostile.value})
    return headers, properties, body


def push_envelope(app: Celery, client: Any, hostile: Hostile) -> None:
    """LPUSH kombu's Redis envelope of the message, built by hand, with the hostile value
    where it goes, as any client of the broker's Redis can."""
    # The body and the envelope are both encoded with room for a value nested as deep as
    # the batch holds: the test runner's own frames count against the limit too.
    with deep_recursion():
        headers, properties, body = message_parts(app, hostile)
        queue = app.conf.task_default_queue
        envelope: dict[str, Any] = {
            "body": dumps(body),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                **properties,
                "delivery_tag": str(uuid.uuid4()),
                "body_encoding": "utf-8",
                "delivery_info": {"exchange": "", "routing_key": queue},
                "priority": properties.get("priority", 0),
            },
        }
        if hostile.where == "envelope":
            envelope[hostile.field] = hostile.value
        elif hostile.where == "property":
            envelope["properties"][hostile.field] = hostile.value
        elif hostile.where == "delivery_info":
            envelope["properties"]["delivery_info"][hostile.field] = hostile.value
        client.lpush(queue, dumps(envelope))


def amqp_carries(hostile: Hostile) -> bool:
    """Whether RabbitMQ can carry the message at all. An infinite or NaN float in a header
    table (py-amqp writes it as an AMQP double, ``d``) is no Erlang float: RabbitMQ's frame
    parser fails on it and closes the publisher's connection with 541 INTERNAL_ERROR, so
    no client (a vanilla kombu producer included) can publish it, and no worker can be
    handed it. The body is JSON, where NaN is a token like any other. A delivery mode
    other than 1 or 2 RabbitMQ refuses likewise (406 PRECONDITION_FAILED, the channel
    closed under the next publish)."""
    if hostile.where == "property" and hostile.field == "delivery_mode":
        return hostile.value in (1, 2)
    return hostile.where != "header" or finite(hostile.value)


def publish(app: Celery, hostile: Hostile) -> bool:
    """Publish the message with kombu's producer (on Redis, through celery-delayq's
    transport, which keeps it in the delayed store if its ``eta`` lies ahead); False if
    kombu, or the transport, refuses to send it (nothing reached the broker)."""
    headers, properties, body = message_parts(app, hostile)
    try:
        with deep_recursion(), app.producer_or_acquire() as producer:
            producer.publish(
                body,
                exchange="",
                routing_key=app.conf.task_default_queue,
                headers=headers,
                serializer="json",
                **properties,
            )
    except Exception:  # the sender's own library refused it (py-amqp's encoder, say)
        return False
    return True


MARKER = re.compile(r"hostile-[0-9a-f]{12}")


def dead_markers(app: Celery) -> dict[str, str]:
    """The hostile markers found in the dead letters' payloads (their bodies decoded when
    base64, as a message kept without its properties has it) -> their reasons."""
    with open_store(app) as store:
        letters = store.dead_letters(app.conf.task_default_queue)
    found = {}
    for letter in letters:
        payload = letter.record.payload.decode("utf-8", "replace")
        for encoded in re.findall(r'"body": "([A-Za-z0-9+/=]+)"', payload):
            with contextlib.suppress(binascii.Error):  # a hostile body that only looks so
                payload += base64.b64decode(encoded).decode("utf-8", "replace")
        for marker in MARKER.findall(payload):
            found[marker] = letter.reason
    return found


#: What Celery logs when it discards a message by design, up to the body it shows.
DISCARDED = re.compile(
    r"(Received and deleted unknown message|Received unregistered task of type"
    r"|Received invalid task message).*?The full contents of the message body was:"
    r"\s*(.*?)\n",
    re.DOTALL,
)


def discarded_markers(output: str) -> set[str]:
    """The hostile markers in the bodies of the messages Celery logged as discarded."""
    found: set[str] = set()
    for match in DISCARDED.finditer(output):
        found.update(MARKER.findall(match.group(2)))
    return found


#: What Celery logs when a task's own time limit stops it (as it may before it records
#: its run: a limit of a few microseconds, or below zero), with the task's id.
TIMED_OUT = re.compile(
    r"(?:Soft|Hard) time limit \(.*?\) exceeded for .*?\[(hostile-[0-9a-f]{12})\]"
)


#: Where a message Celery discards by design may come from: no task message at all (no
#: "task" header, or no headers), a task name no worker knows, an eta or expiry that is
#: no date (InvalidTaskError).
DISCARDABLE = {
    ("envelope", "headers"),
    ("header", "task"),
    ("header", "eta"),
    ("header", "expires"),
}


def hostile_between_good_tasks(
    app: Celery,
    broker_url: str,
    redis_client: Any,
    send: Callable[[Hostile], bool],
    batch: list[Hostile],
    **kw: Any,
) -> None:
    """Run one prefork worker while the batch arrives between good tasks; check that it
    lives on, runs every good task once, and settles every hostile message."""
    with celery_process(
        "worker", broker_url, worker_settings(app), "-P", "prefork", "-c", "2", **kw
    ) as worker:
        pid = worker.popen.pid
        good = [remember(app, "good first")]
        sent = []
        for hostile in batch:
            if send(hostile):
                sent.append(hostile)
            good.append(remember(app, f"good {len(good)}"))
        good_ids = {g.id for g in good}

        def unsettled() -> list[Hostile]:
            recorded = runs(redis_client)
            ran = {run.get("label") for run in recorded}
            if not good_ids <= {run["id"] for run in recorded}:
                return batch  # not yet every good task
            output = worker.output
            settled = ran | dead_markers(app).keys() | discarded_markers(output)
            settled |= set(TIMED_OUT.findall(output))
            return [h for h in sent if h.marker not in settled]

        try:
            wait_until(
                lambda: not unsettled(),
                timeout=120,
                what="every good task ran, every hostile message settled",
                abort=lambda: worker.popen.poll() is not None and "the worker exited",
            )
        except Exception:
            print(worker.output)
            print("unsettled:", *map(str, unsettled()), sep="\n  ")
            raise
        last = remember(app, "good last")
        wait_until(lambda: last.id in {r["id"] for r in runs(redis_client)}, timeout=30)
        assert worker.popen.poll() is None and worker.popen.pid == pid, worker.output
        output = worker.output
    assert "Unrecoverable error" not in output, output
    assert len(sent) >= BATCH * 2 // 3, "most of the batch must reach the broker"
    recorded = Counter(
        run["id"] for run in runs(redis_client) if run.get("label", "").startswith("good")
    )
    assert recorded == Counter([*good_ids, last.id])
    dead = dead_markers(app)
    assert all(dead[h.marker] for h in sent if h.marker in dead), "a dead letter has no reason"
    ran = {run.get("label") for run in runs(redis_client)} | set(TIMED_OUT.findall(output))
    for h in sent:
        if h.marker not in ran and h.marker not in dead:
            assert (h.where, h.field) in DISCARDABLE, f"discarded, not dead-lettered: {h}"


def without_slow_calls(redis_client: Any, run: Callable[[], None]) -> None:
    """``run()`` (a batch through a worker), and no call to the test's own Redis taking
    10 ms or more meanwhile (SLOWLOG). Should one, the batch runs again (the same values,
    new markers): a message that makes Redis slow makes it slow again, where a call that
    waited for a core of this shared machine once seldom waits twice."""
    for attempt in range(2):
        redis_client.config_set("slowlog-log-slower-than", 10_000)
        redis_client.slowlog_reset()
        redis_client.delete("test:runs")
        run()
        slow = redis_client.slowlog_get(128)
        if not slow:
            return
        print(f"calls of 10 ms or more (attempt {attempt + 1}):", slow)
    raise AssertionError(f"Redis calls of 10 ms or more, twice: {slow}")


@pytest.mark.promise("poison-dead-lettered")
def test_generated_hostile_envelopes_on_redis_run_or_go_to_the_dead_letters_and_redis_stays_fast(
    make_app: Callable[..., Celery], redis_server: Any, redis_client: Any
) -> None:
    app = make_app()
    produced = []

    def send(hostile: Hostile) -> bool:
        """Every other message the producer can make goes through it, the rest raw."""
        if hostile.where in ("header", "property", "embed"):
            produced.append(hostile)
            if len(produced) % 2:
                return publish(app, hostile)
        push_envelope(app, redis_client, hostile)
        return True

    def run() -> None:
        batch = generate(REDIS_PLACES)
        hostile_between_good_tasks(app, redis_server.url, redis_client, send, batch)
        assert redis_client.llen(app.conf.task_default_queue) == 0
        assert redis_client.hlen("unacked") == 0

    without_slow_calls(redis_client, run)


def test_generated_hostile_envelopes_on_rabbitmq_run_or_go_to_the_dead_letters(
    make_amqp_app: Callable[..., Celery], rabbitmq_url: str, redis_server: Any, redis_client: Any
) -> None:
    app = make_amqp_app()

    def run() -> None:
        batch = generate(AMQP_PLACES, amqp_carries)
        send = partial(publish, app)
        settings = {"record_url": redis_server.url}
        hostile_between_good_tasks(app, rabbitmq_url, redis_client, send, batch, **settings)
        with app.connection_for_write() as connection:
            _, ready, _ = connection.default_channel.queue_declare(
                app.conf.task_default_queue, passive=True
            )
        assert ready == 0

    without_slow_calls(redis_client, run)
