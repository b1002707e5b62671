"""Generated hostile envelopes: hypothesis gives any header, property or envelope field of
a Celery protocol-2 message a hostile type or depth (lists, dicts, nesting 1000 deep, huge
ints, 1e400, NaN, None, booleans, bytes-ish strings), or a body that is not base64 or not
JSON. A real prefork ``celery worker`` on Redis and on RabbitMQ consumes them between good
tasks: it lives on, every good task runs once, and every hostile message either runs as
Celery runs it or goes to the dead letters with a reason; none is lost or left in the
queue, and no Redis call takes 10 ms or more."""

from __future__ import annotations

import json
import math
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until

from ..helpers import celery_process, remember, runs
from .test_poison_messages import deep_recursion, nested, worker_settings

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.slow,
    pytest.mark.promise("crafted-input-stops-nothing"),
]

HEADERS = (
    "id", "task", "eta", "expires", "timelimit", "retries", "stamped_headers", "stamps",
    "argsrepr", "kwargsrepr", "root_id", "parent_id", "group", "origin", "lang", "shadow",
    "ignore_result", "soft_time_limit", "replaced_task_nesting",
)  # fmt: skip
PROPERTIES = ("correlation_id", "reply_to", "priority", "delivery_mode")
#: fields of the Redis envelope itself (kombu's JSON around the body)
#: (not "headers": without a "task" header Celery deletes the message as unknown, and a
#: string "task" naming no task it discards as unregistered; see the module's notes)
ENVELOPE = ("content-type", "content-encoding", "body", "properties")
ENVELOPE_PROPERTIES = ("delivery_tag", "body_encoding", "delivery_info", "priority")
BODY_EMBED = ("callbacks", "errbacks", "chord", "chain")

hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**64, -(2**63) - 1, 10**30]),
    st.sampled_from([math.inf, -math.inf, math.nan, 1e308]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.sampled_from(["\x00\xff", "\ud7ff", "b'\\x80'", "", " ", "{}", "[]", "null"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([nested(1000), {"a": {"b": [[{"c": None}]]}}, [[], {}], ["a", {}]]),
)


def publish_hostile(app: Celery, marker: str, where: str, field: str, value: Any) -> bool:
    """Publish one task message of remember whose ``field`` (in ``where``) is ``value``;
    False if the client library itself refuses to send it."""
    message = app.amqp.create_task_message(
        marker, "tests.worker_app.remember", (), {"label": marker}
    )
    headers = {**message.headers, "x-hostile": marker}
    properties = dict(message.properties)
    body = message.body
    if where == "header":
        headers[field] = value
    elif where == "property":
        properties[field] = value
    elif where == "embed":
        args, kwargs, embed = body
        body = (args, kwargs, {**embed, field: value})
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
    except Exception:  # the sender's own library refused it: nothing reached the broker
        return False
    return True


def push_raw_envelope(app: Celery, client: Any, marker: str, field: str, value: Any) -> None:
    """LPUSH a kombu Redis envelope of remember whose ``field`` is ``value``, as any
    client of the broker's Redis can."""
    message = app.amqp.create_task_message(
        marker, "tests.worker_app.remember", (), {"label": marker}
    )
    envelope: dict[str, Any] = {
        "body": json.dumps(message.body),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {**message.headers, "x-hostile": marker},
        "properties": {
            "delivery_tag": str(uuid.uuid4()),
            "body_encoding": "utf-8",
            "delivery_info": {"exchange": "", "routing_key": app.conf.task_default_queue},
            "priority": 0,
            "correlation_id": marker,
        },
    }
    if field in ENVELOPE_PROPERTIES:
        envelope["properties"][field] = value
    elif field == "body" and isinstance(value, str):
        envelope["body"] = value  # not base64 and, mostly, not JSON
    else:
        envelope[field] = value
    with deep_recursion():
        raw = json.dumps(envelope)
    client.lpush(app.conf.task_default_queue, raw)


def dead_markers(app: Celery) -> dict[str, str]:
    """The hostile markers found in the dead letters' payloads -> their reasons."""
    with open_store(app) as store:
        letters = store.dead.list(app.conf.task_default_queue)
    found = {}
    for letter in letters:
        payload = letter.record.payload.decode("utf-8", "replace")
        for part in payload.split("hostile-")[1:]:
            found[f"hostile-{part[:12]}"] = letter.reason
    return found


def feed(app: Celery, redis_client: Any, raw: bool) -> tuple[list[Any], list[str]]:
    """Publish generated hostile messages between good tasks; the good results and the
    hostile markers that reached the broker."""
    good = [remember(app, "good first")]
    sent: list[str] = []
    fields = [("header", f) for f in HEADERS] + [("property", f) for f in PROPERTIES]
    fields += [("embed", f) for f in BODY_EMBED]
    if raw:
        fields += [("raw", f) for f in ENVELOPE + ENVELOPE_PROPERTIES]

    @settings(
        max_examples=40,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(fields), hostile)
    def one(place: tuple[str, str], value: Any) -> None:
        where, field = place
        if field == "task" and isinstance(value, str):
            return  # Celery discards an unregistered task name by design
        marker = f"hostile-{uuid.uuid4().hex[:12]}"
        if where == "raw":
            push_raw_envelope(app, redis_client, marker, field, value)
        elif not publish_hostile(app, marker, where, field, value):
            return
        sent.append(marker)
        good.append(remember(app, f"good {len(good)}"))

    one()
    return good, sent


def hostile_between_good_tasks(
    app: Celery, broker_url: str, redis_client: Any, raw: bool, **kw: Any
) -> None:
    settings_ = worker_settings(app)
    with celery_process(
        "worker", broker_url, settings_, "-P", "prefork", "-c", "2", **kw
    ) as worker:
        pid = worker.popen.pid
        good, sent = feed(app, redis_client, raw)

        def settled() -> bool:
            ran = {run.get("label") for run in runs(redis_client)}
            dead = dead_markers(app)
            return all(g.id in {r["id"] for r in runs(redis_client)} for g in good) and all(
                marker in ran or marker in dead for marker in sent
            )

        try:
            wait_until(settled, timeout=90, what="every good task ran, every hostile settled")
        except Exception:
            ran = {run.get("label") for run in runs(redis_client)}
            dead = dead_markers(app)
            print([m for m in sent if m not in ran and m not in dead])
            print(worker.output)
            raise
        assert worker.popen.poll() is None and worker.popen.pid == pid, worker.output
        last = remember(app, "good after")
        wait_until(lambda: last.id in {r["id"] for r in runs(redis_client)}, timeout=30)
        output = worker.output
    good_ids = Counter(
        run["id"] for run in runs(redis_client) if run.get("label", "").startswith("good")
    )
    assert good_ids == Counter([g.id for g in good] + [last.id])
    assert "Unrecoverable error" not in output
    dead = dead_markers(app)
    assert all(reason for marker, reason in dead.items() if marker in sent)


@pytest.mark.promise("celery-poison-dead-lettered")
def test_generated_hostile_envelopes_on_redis_run_or_go_to_the_dead_letters_and_redis_stays_fast(
    make_app: Callable[..., Celery], redis_server: Any, redis_client: Any
) -> None:
    redis_client.config_set("slowlog-log-slower-than", 10_000)
    redis_client.slowlog_reset()
    app = make_app()
    hostile_between_good_tasks(app, redis_server.url, redis_client, raw=True)
    queue = app.conf.task_default_queue
    assert redis_client.llen(queue) == 0
    assert redis_client.hlen("unacked") == 0
    slow = redis_client.slowlog_get(128)
    assert not slow, slow


@pytest.mark.promise("celery-poison-dead-lettered")
def test_generated_hostile_envelopes_on_rabbitmq_run_or_go_to_the_dead_letters(
    make_amqp_app: Callable[..., Celery], rabbitmq_url: str, redis_server: Any, redis_client: Any
) -> None:
    redis_client.config_set("slowlog-log-slower-than", 10_000)
    redis_client.slowlog_reset()
    app = make_amqp_app()
    hostile_between_good_tasks(
        app, rabbitmq_url, redis_client, raw=False, record_url=redis_server.url
    )
    with app.connection_for_write() as connection:
        _, ready, _ = connection.default_channel.queue_declare(
            app.conf.task_default_queue, passive=True
        )
    assert ready == 0
    slow = redis_client.slowlog_get(128)
    assert not slow, slow
