"""Poison messages: valid kombu envelopes whose headers Celery fails on (a list nested
950 deep, ``timelimit = ["a", {}]``, ``stamped_headers = 5``, a ``task`` that is a list)
each ended a prefork worker ("Unrecoverable error"), and came back to end the next one.
Sent between good tasks to a real prefork ``celery worker`` on Redis, RabbitMQ and SQS
(moto's server), each goes to the dead letters of its queue with the reason, the worker
lives on, and every good task runs once. A message that kills its worker outright comes
back after each death until ``delayq_max_deliveries``, then goes to the dead letters."""

from __future__ import annotations

import base64
import json
import re
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store
from celery_delayq.testing import wait_until
from celery_delayq.testing.redis_server import RedisServer

from ..helpers import celery_process, remember, runs

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(180),
    pytest.mark.slow,
    pytest.mark.promise("crafted-input-stops-nothing"),
]


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


#: header -> (the poison value, what its dead letter's reason says)
POISONS: dict[str, tuple[Any, str]] = {
    # on SQS kombu's reader may already fail on it (deeper in the stack than kombu's own
    # decode, which did not): refused as unreadable, before Celery
    "deep": (nested(950), "nest deeper than|RecursionError"),
    "timelimit": (["a", {}], '"timelimit"'),
    "stamped_headers": (5, '"stamped_headers"'),
    # Celery would raise (TypeError, a list as a key), or discard one that is no string
    "task": (["tests.worker_app.remember"], '"task" header is not a name'),
    # Celery would run it, fail to count it (a list as a name) and never acknowledge it:
    # it came back to run again after every restore
    "shadow": (["tests.worker_app.remember"], '"shadow" header is not a name'),
    # Celery would log "Can't decode message body" and delete it
    "body": (None, "its body cannot be decoded"),
}


@contextmanager
def deep_recursion() -> Iterator[None]:
    """Room for this process's encoders to write a header nested 950 deep."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def send_poison(app: Celery, header: str) -> str:
    """Publish a task message of tests.worker_app.remember whose ``header`` is poison;
    its task id."""
    task_id = f"poison-{header}-{uuid.uuid4().hex[:8]}"
    message = app.amqp.create_task_message(
        task_id, "tests.worker_app.remember", (), {"label": f"poison {header}"}
    )
    queue = app.conf.task_default_queue
    headers = {**message.headers}
    body: Any = message.body
    encoding: dict[str, Any] = {"serializer": "json"}
    if header == "body":  # JSON that does not parse
        body, encoding = b'["not json', {"content_type": "application/json"}
        encoding["content_encoding"] = "utf-8"
    else:
        headers[header] = POISONS[header][0]
    with deep_recursion(), app.producer_or_acquire() as producer:
        producer.publish(
            body,
            exchange="",
            routing_key=queue,
            headers=headers,
            **encoding,
            **message.properties,
        )
    return task_id


def dead_letters(app: Celery) -> dict[str, str]:
    """The dead letters of the app's queue: the task id in each payload -> its reason."""
    with open_store(app) as store:
        letters = store.dead_letters(app.conf.task_default_queue)
    found = {}
    for letter in letters:
        payload = letter.record.payload.decode("utf-8", "replace")
        ids = [header for header in POISONS if f"poison-{header}-" in payload]
        found[ids[0] if len(ids) == 1 else payload[:80]] = letter.reason
    return found


def worker_settings(app: Celery) -> dict[str, Any]:
    keys = ("broker_transport", "broker_transport_options", "delayq_store_url")
    settings = {key: app.conf[key] for key in keys if app.conf.get(key) is not None}
    return {**settings, "task_default_queue": app.conf.task_default_queue}


def poison_between_good_tasks(app: Celery, broker_url: str, redis_client: Any, **kw: Any) -> Any:
    """Run a prefork worker while the poison messages arrive between good tasks; return
    the worker's output once every good task ran and every poison is dead."""
    settings = worker_settings(app)
    with celery_process("worker", broker_url, settings, "-P", "prefork", "-c", "2", **kw) as worker:
        good = [remember(app, "good 0")]
        for n, header in enumerate(POISONS, start=1):
            send_poison(app, header)
            good.append(remember(app, f"good {n}"))
        good.append(remember(app, "good last"))
        try:
            wait_until(lambda: len(dead_letters(app)) >= len(POISONS), timeout=60, what="all dead")
            wait_until(lambda: len(runs(redis_client)) >= len(good), timeout=60, what="good runs")
        except Exception:
            print(worker.output)
            raise
        assert worker.popen.poll() is None, worker.output
        output = worker.output
    assert Counter(run["id"] for run in runs(redis_client)) == Counter(r.id for r in good)
    letters = dead_letters(app)
    assert set(letters) == set(POISONS), letters
    for header, (_, reason) in POISONS.items():
        assert re.search(reason, letters[header]), letters
    assert "Unrecoverable error" not in output
    return output


@pytest.mark.promise("celery-poison-dead-lettered")
def test_poison_messages_on_redis_go_to_the_dead_letters_and_the_worker_lives_on(
    make_app: Callable[..., Celery], redis_server: Any, redis_client: Any
) -> None:
    app = make_app()
    poison_between_good_tasks(app, redis_server.url, redis_client)
    queue = app.conf.task_default_queue
    assert redis_client.llen(queue) == 0
    assert redis_client.hlen("unacked") == 0


@pytest.mark.promise("celery-poison-dead-lettered")
def test_poison_messages_on_rabbitmq_go_to_the_dead_letters_and_the_worker_lives_on(
    make_amqp_app: Callable[..., Celery], rabbitmq_url: str, redis_server: Any, redis_client: Any
) -> None:
    app = make_amqp_app()
    poison_between_good_tasks(app, rabbitmq_url, redis_client, record_url=redis_server.url)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        _, ready, _ = channel.queue_declare(app.conf.task_default_queue, passive=True)
    assert ready == 0


@pytest.mark.promise("celery-poison-dead-lettered")
def test_poison_messages_on_sqs_go_to_the_dead_letters_and_the_worker_lives_on(
    make_sqs_app: Callable[..., Celery], sqs_server: str, redis_server: Any, redis_client: Any
) -> None:
    app = make_sqs_app()
    options = app.conf.broker_transport_options
    app.conf.broker_transport_options = {**options, "polling_interval": 0.1, "wait_time_seconds": 0}
    poison_between_good_tasks(app, sqs_server, redis_client, record_url=redis_server.url)


#: Taken messages come back 3 s after their worker last had them; workers look every 1 s.
KILLING = {
    "delayq_max_deliveries": 2,
    "broker_transport_options": {
        "visibility_timeout": 3,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
}


def killed_until_dead(
    app: Celery, broker_url: str, settings: dict[str, Any], redis_client: Any, **kw: Any
) -> Any:
    """Send a task that SIGKILLs its worker (main process and pool process) on every
    delivery, as running out of memory would, and start a worker after each death; the
    dead letter once a worker moved the message there instead (and ran a good task)."""
    queue = app.conf.task_default_queue
    killer = app.send_task("tests.worker_app.kill_worker")

    def dead() -> list[Any]:
        with open_store(app) as store:
            return store.dead_letters(queue)

    deaths = 0
    prefork = ("-P", "prefork", "-c", "1")
    while not dead():
        assert deaths < 3, "the message came back after delayq_max_deliveries"
        with celery_process("worker", broker_url, settings, *prefork, **kw) as worker:
            wait_until(lambda: worker.popen.poll() is not None or dead(), timeout=60)
            if worker.popen.poll() is not None:
                deaths += 1
                continue
            good = remember(app, "after")
            wait_until(lambda: len(runs(redis_client)) == 3, timeout=30, what="the good task ran")
            assert worker.popen.poll() is None
    assert deaths == 2
    assert [run["id"] for run in runs(redis_client)] == [killer.id, killer.id, good.id]
    (letter,) = dead()
    assert "delivered 3 times" in letter.reason, letter.reason
    assert killer.id.encode() in letter.record.payload
    return letter


@pytest.mark.promise("deliveries-bounded")
def test_a_message_that_kills_its_worker_goes_to_the_dead_letters_after_max_deliveries(
    make_app: Callable[..., Celery], redis_server: Any, redis_client: Any
) -> None:
    """Redis: the next worker's restore brings the message back after each death,
    counted in its ``delayq_redeliveries`` header; the third delivery
    (``delayq_max_deliveries`` = 2) goes to the dead letters."""
    app = make_app(**KILLING)
    killed_until_dead(app, redis_server.url, KILLING, redis_client)
    assert redis_client.llen(app.conf.task_default_queue) == 0
    assert redis_client.hlen("unacked") == 0


@pytest.mark.promise("deliveries-bounded")
def test_a_message_that_kills_its_worker_on_a_rabbitmq_classic_queue_is_counted_in_the_store(
    make_amqp_app: Callable[..., Celery], rabbitmq_url: str, redis_server: Any, redis_client: Any
) -> None:
    """RabbitMQ gives a classic queue's message back at once, marked redelivered, with no
    count; the delayed store counts them, and the third delivery goes to the dead
    letters."""
    app = make_amqp_app(delayq_max_deliveries=2)
    settings = {**worker_settings(app), "delayq_max_deliveries": 2}
    killed_until_dead(app, rabbitmq_url, settings, redis_client, record_url=redis_server.url)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        _, ready, _ = channel.queue_declare(app.conf.task_default_queue, passive=True)
    assert ready == 0


@pytest.mark.promise("celery-poison-dead-lettered")
def test_a_poison_message_waits_in_its_queue_while_the_store_is_down(
    make_amqp_app: Callable[..., Celery], rabbitmq_url: str, redis_server: Any, redis_client: Any
) -> None:
    """RabbitMQ, its store in a Redis of its own that stops: the poison message's dead
    letter cannot be written, so it goes back to its queue a few seconds later (no busy
    loop of redeliveries), and to the dead letters once the store is back."""
    with RedisServer() as store:
        app = make_amqp_app(delayq_store_url=store.url)
        settings = worker_settings(app)
        prefork = ("-P", "prefork", "-c", "1")
        refused = "could not go to the dead letters"
        with celery_process(
            "worker", rabbitmq_url, settings, *prefork, record_url=redis_server.url
        ) as worker:
            store.stop()
            send_poison(app, "stamped_headers")
            worker.wait_for_output(refused, timeout=30)
            store.start()
            wait_until(lambda: len(dead_letters(app)) == 1, timeout=30, what="the dead letter")
            good = remember(app, "good")
            wait_until(lambda: len(runs(redis_client)) == 1, timeout=30, what="the good task ran")
            assert worker.popen.poll() is None, worker.output
            tries = worker.output.count(refused)
        assert 1 <= tries <= 3, tries  # one every 5 s while Redis restarted, not thousands
        assert [run["id"] for run in runs(redis_client)] == [good.id]
        assert '"stamped_headers"' in dead_letters(app)["stamped_headers"]


#: SQS message bodies kombu's SQS transport cannot turn into a message: each raised in the
#: worker's event loop ("Unrecoverable error"), and SQS gave it to the next worker.
UNREADABLE_ON_SQS = {
    '{"properties": 5, "body": "x"}': '"properties" is not an object',
    '{"properties": {"delivery_info": []}, "body": "x"}': '"delivery_info" is not an object',
    '{"headers": [1], "properties": {}, "body": "eA=="}': "kombu cannot read it",
}


@pytest.mark.promise("celery-poison-dead-lettered")
def test_envelopes_kombu_cannot_read_on_sqs_go_to_the_dead_letters_and_the_worker_lives_on(
    make_sqs_app: Callable[..., Celery], sqs_server: str, redis_server: Any, redis_client: Any
) -> None:
    import boto3

    app = make_sqs_app()
    options = app.conf.broker_transport_options
    app.conf.broker_transport_options = {**options, "polling_interval": 0.1, "wait_time_seconds": 0}
    queue = app.conf.task_default_queue
    good = [remember(app, "good 0")]  # creates the queue
    host_port = sqs_server.rpartition("@")[2]
    sqs = boto3.client(
        "sqs",
        endpoint_url=f"http://{host_port}",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    for n, body in enumerate(UNREADABLE_ON_SQS, start=1):
        encoded = base64.b64encode(body.encode()).decode()
        sqs.send_message(QueueUrl=url, MessageBody=encoded)
        good.append(remember(app, f"good {n}"))
    settings = worker_settings(app)
    with celery_process(
        "worker", sqs_server, settings, "-P", "prefork", "-c", "1", record_url=redis_server.url
    ) as worker:
        wait_until(lambda: len(runs(redis_client)) >= len(good), timeout=60, what="good runs")
        with open_store(app) as store:
            wait_until(lambda: len(store.dead_letters(queue)) == 3, timeout=30, what="3 dead")
            letters = {letter.record.payload: letter.reason for letter in store.dead_letters(queue)}
        assert worker.popen.poll() is None, worker.output
    assert Counter(run["id"] for run in runs(redis_client)) == Counter(r.id for r in good)
    for body, reason in UNREADABLE_ON_SQS.items():
        assert reason in letters[body.encode()], letters
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0"


#: What py-amqp could not decode in the worker's event loop ("Unrecoverable error": the
#: worker exited, and the next one took the message and exited too) -> (extra headers,
#: extra properties, what the dead letter's reason says). RabbitMQ carries both as sent.
UNDECODABLE_ON_RABBITMQ = {
    # a header table nested as deep as fits in a frame: py-amqp decodes one level per
    # Python call, and 3000 levels raised RecursionError
    "deep": ({"deep": nested(3000)}, {}, "nest deeper than"),
    # a short string property that is not UTF-8: UnicodeDecodeError
    "bytes": ({}, {"correlation_id": b"\xc0\xff"}, "cannot read its properties"),
}


@pytest.mark.parametrize("shape", list(UNDECODABLE_ON_RABBITMQ))
@pytest.mark.promise("celery-poison-dead-lettered")
def test_properties_py_amqp_cannot_decode_on_rabbitmq_go_to_the_dead_letters(
    make_amqp_app: Callable[..., Celery],
    rabbitmq_url: str,
    redis_server: Any,
    redis_client: Any,
    shape: str,
) -> None:
    app = make_amqp_app()
    queue = app.conf.task_default_queue
    headers, properties, reason = UNDECODABLE_ON_RABBITMQ[shape]
    task_id = f"poison-{shape}-{uuid.uuid4().hex[:8]}"
    message = app.amqp.create_task_message(
        task_id, "tests.worker_app.remember", (), {"label": task_id}
    )
    settings = worker_settings(app)
    prefork = ("-P", "prefork", "-c", "1")
    with celery_process(
        "worker", rabbitmq_url, settings, *prefork, record_url=redis_server.url
    ) as worker:
        with deep_recursion(), app.producer_or_acquire() as producer:
            producer.publish(
                message.body,
                exchange="",
                routing_key=queue,
                headers={**message.headers, **headers},
                serializer="json",
                **{**message.properties, **properties},
            )
        good = remember(app, "good")
        exited = lambda: worker.popen.poll() is not None and worker.output  # noqa: E731
        wait_until(lambda: runs(redis_client), timeout=30, what="the good task", abort=exited)
        with open_store(app) as store:
            (letter,) = wait_until(lambda: store.dead_letters(queue), timeout=30, what="the letter")
        assert worker.popen.poll() is None, worker.output
        assert "Unrecoverable error" not in worker.output
    assert [run["id"] for run in runs(redis_client)] == [good.id]
    assert reason in letter.reason, letter.reason
    with deep_recursion():
        kept = json.loads(letter.record.payload)  # the envelope, with the body at least
    body = kept["body"]
    if kept["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body).decode()
    assert task_id in body
