"""A message the broker refuses is refused alone: at publish when the broker's client
would refuse it (as a publish made at once is refused), and, stored before (or crafted
in Redis), dead-lettered after its tries while its batch, its queue and every other
queue go on; ``dead resend`` says what left the dead letters (real RabbitMQ, moto's SQS
server, real Redis)."""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import math
import threading
import urllib.parse
import uuid
from collections.abc import Callable
from typing import Any

import amqp
import kombu.exceptions
import pytest
import redis
from amqp.exceptions import FrameError, FrameSyntaxError
from celery import Celery

import celery_delayq
from celery_delayq.brokers.amqp.envelope import destination, envelope
from celery_delayq.brokers.connect import open_store
from celery_delayq.brokers.sqs import SQSUnavailable
from celery_delayq.core.layout.record import Record, task_key
from celery_delayq.core.results import DeadLetter
from celery_delayq.core.store import Scheduled
from celery_delayq.ops.api import deliver_all_due
from celery_delayq.testing import wait_until

from ...helpers import invoke, take_all
from ..test_sqs import sqs_messages

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: Tries before a refused message is dead-lettered, and the back-off (s) between them.
TRIES = {"delayq_handover_tries": 2, "delayq_handover_backoff": 0.001}


def overdue(app: Celery, *results: Any) -> None:
    """Make these delayed tasks due now (by the store's clock), without racing a clock."""
    for result in results:
        assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1


def store_due_now(app: Celery, queue: str, task_id: str, where: str, payload: bytes) -> None:
    """Keep ``payload`` as a message of ``queue`` due now, written straight into the
    store: a message stored before its publish was checked, or crafted in Redis."""
    with open_store(app) as store:
        due = store.server_time_ms() - 1
        store.schedule_many([Scheduled(queue, task_id, task_id, due, where, payload)])


def dead_after_passes(app: Celery, wanted: int) -> list[DeadLetter]:
    """Run mover passes (each must succeed) until ``wanted`` dead letters are kept."""
    with open_store(app) as store:

        def dead() -> list[DeadLetter]:
            store.move_all_due()
            return store.dead_letters()

        return wait_until(lambda: len(letters := dead()) >= wanted and letters, timeout=30)


# RabbitMQ


def amqp_table_error(error: BaseException) -> str:
    """py-amqp's message for a header it cannot encode, without the value's repr."""
    return str(error).split(" [value:")[0]


@pytest.mark.promise("unencodable-publish-raises-at-send")
def test_a_delayed_publish_with_a_header_py_amqp_cannot_encode_fails_as_one_made_at_once(
    make_amqp_app: Callable[..., Celery],
) -> None:
    app = make_amqp_app()
    with pytest.raises(FrameSyntaxError) as at_once:
        app.send_task("tests.remember", headers={"x": uuid.uuid4()})
    with pytest.raises(FrameSyntaxError) as delayed:
        app.send_task("tests.remember", countdown=1, headers={"x": uuid.uuid4()})

    assert amqp_table_error(delayed.value) == amqp_table_error(at_once.value)
    assert "UUID" in str(delayed.value)
    assert celery_delayq.backlog(app) == []
    assert take_all(app, app.conf.task_default_queue) == []
    app.send_task("tests.remember", countdown=1, headers={"x": str(uuid.uuid4())})
    assert celery_delayq.backlog(app)[0].pending == 1  # the producer goes on


@pytest.mark.promise("unencodable-publish-raises-at-send")
def test_a_delayed_publish_with_a_header_rabbitmq_cannot_read_fails_rather_than_its_hand_over(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """py-amqp encodes an infinite or NaN float as any double, but RabbitMQ closes the
    connection on it (541): every hand-over of it failed, with its batch, and was retried
    for ever. Such a delayed publish is refused at once."""
    app = make_amqp_app()
    for value in (math.nan, -math.inf, [1, {"y": math.inf}]):
        with pytest.raises(FrameSyntaxError, match="RabbitMQ cannot read it"):
            app.send_task("tests.remember", countdown=1, headers={"x": value})
    assert celery_delayq.backlog(app) == []


@pytest.mark.promise("unencodable-publish-raises-at-send")
def test_a_delayed_publish_with_headers_over_a_frame_fails_rather_than_its_hand_over(
    make_amqp_app: Callable[..., Celery],
) -> None:
    """Properties and headers travel in one frame; over ``frame_max``, RabbitMQ would
    close the hand-over's connection. Such a delayed publish is refused at once."""
    app = make_amqp_app(delayq_max_message_size=0)  # the frame check, not the size limit
    with pytest.raises(FrameError, match="frame_max"):
        app.send_task("tests.remember", countdown=1, headers={"x": "y" * 200_000})
    assert celery_delayq.backlog(app) == []


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (uuid.uuid4(), "FrameSyntaxError: Table type <class 'uuid.UUID'>"),
        ("y" * 200_000, "FrameError: "),
        (math.nan, "FrameSyntaxError: Table value NaN or infinity"),
    ],
    ids=["a type py-amqp cannot encode", "over frame_max", "a double RabbitMQ cannot read"],
)
@pytest.mark.promise(
    "handover-refused-dead-lettered", "handover-refusal-stops-one", "crafted-input-stops-nothing"
)
def test_a_stored_header_the_hand_over_cannot_send_is_dead_lettered_alone_and_queues_go_on(
    make_amqp_app: Callable[..., Celery], redis_client: redis.Redis, header: Any, reason: str
) -> None:
    """20 good messages and one whose stored header cannot be sent, due together in one
    queue, 20 more in another: every good one reaches RabbitMQ, each mover pass
    succeeds, and the bad one is dead-lettered with the reason after its tries."""
    app = make_amqp_app(**TRIES)
    first, second = app.conf.task_default_queue, f"{app.conf.task_default_queue}-2"
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(20)]
    other = [app.send_task("tests.remember", (i,), countdown=3600, queue=second) for i in range(20)]
    overdue(app, *good[:10])
    bad_id = str(uuid.uuid4())
    bad = amqp.Message(b"[[], {}, {}]", application_headers={"id": bad_id, "x": header})
    store_due_now(app, first, bad_id, destination("", first), envelope(bad))
    overdue(app, *good[10:], *other)

    (letter,) = dead_after_passes(app, 1)

    assert letter.task_id == bad_id and letter.tries == 2
    assert letter.reason.startswith(f"cannot be encoded for the broker: {reason}")
    assert sorted(m.headers["id"] for m in take_all(app, first)) == sorted(r.id for r in good)
    assert sorted(m.headers["id"] for m in take_all(app, second)) == sorted(r.id for r in other)
    assert redis_client.keys("*inflight*") == []


# SQS


def sqs_envelope(task_id: str, **properties: Any) -> bytes:
    """A kombu envelope as the SQS channel stores it, with these extra properties."""
    body = base64.b64encode(json.dumps([[], {}, {}]).encode()).decode()
    return json.dumps(
        {
            "body": body,
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": {"id": task_id, "task": "tests.remember"},
            "properties": {"body_encoding": "base64", "delivery_tag": task_id, **properties},
        }
    ).encode()


def test_a_delayed_publish_botocore_refuses_fails_as_one_made_at_once(
    make_sqs_app: Callable[..., Celery],
) -> None:
    """kombu passes a FIFO queue's MessageGroupId to SendMessage (every kombu version;
    some pass a standard queue's too), and botocore checks its type before sending."""
    app = make_sqs_app()
    fifo = f"{app.conf.task_default_queue}.fifo"
    with pytest.raises(kombu.exceptions.OperationalError) as at_once:
        app.send_task("tests.remember", queue=fifo, MessageGroupId=5)
    with pytest.raises(kombu.exceptions.OperationalError) as delayed:
        app.send_task("tests.remember", countdown=2, queue=fifo, MessageGroupId=5)

    assert str(delayed.value) == str(at_once.value)
    assert "Invalid type for parameter MessageGroupId" in str(delayed.value)
    assert celery_delayq.backlog(app) == []
    assert sqs_messages(app, fifo) == []
    app.send_task("tests.remember", countdown=2, queue=fifo, MessageGroupId="5")
    assert celery_delayq.backlog(app)[0].pending == 1  # the producer goes on


@pytest.mark.promise("crafted-input-stops-nothing", "sqs-refusal-dead-lettered-alone")
def test_a_stored_message_botocore_refuses_is_dead_lettered_alone_and_every_queue_goes_on(
    make_sqs_app: Callable[..., Celery],
) -> None:
    """Message attributes that are no map, a FIFO queue's MessageGroupId that is no
    string: botocore refuses the SendMessage (a ``BotoCoreError``, which kombu lists
    among SQS's connection errors) before anything is sent. Each is dead-lettered with
    the reason after its tries; the 50 good messages of one queue and 20 of the other
    arrive."""
    app = make_sqs_app(**TRIES)
    first, second = app.conf.task_default_queue, f"{app.conf.task_default_queue}.fifo"
    good = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(50)]
    other = [app.send_task("tests.remember", (i,), countdown=3600, queue=second) for i in range(20)]
    overdue(app, *good[:25])
    group, attributes = str(uuid.uuid4()), str(uuid.uuid4())
    store_due_now(app, second, group, second, sqs_envelope(group, MessageGroupId=5))
    store_due_now(app, first, attributes, first, sqs_envelope(attributes, message_attributes="zz"))
    overdue(app, *good[25:], *other)

    letters = {letter.task_id: letter for letter in dead_after_passes(app, 2)}

    assert set(letters) == {group, attributes}
    assert all(letter.tries == 2 for letter in letters.values())
    assert "Invalid type for parameter MessageGroupId" in letters[group].reason
    assert "Invalid type for parameter MessageAttributes" in letters[attributes].reason
    assert letters[group].reason.startswith("ParamValidationError: ")
    assert "\n" not in letters[group].reason  # one line, as `list --dead` shows it
    delivered = [m["headers"]["id"] for m in sqs_messages(app, first)]
    assert sorted(delivered) == sorted(r.id for r in good)
    delivered = [m["headers"]["id"] for m in sqs_messages(app, second)]
    assert sorted(delivered) == sorted(r.id for r in other)


@pytest.mark.promise("sqs-outage-charges-no-try")
def test_an_unreachable_sqs_gives_the_batch_back_and_charges_no_message_a_try(
    make_sqs_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A lost connection is no refusal: the claims come back due at once, no try is
    counted, nothing is dead-lettered, and the next pass on a reachable SQS delivers."""
    app = make_sqs_app(delayq_handover_tries=1)
    sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
    overdue(app, *sent)
    down = make_sqs_app(delayq_handover_tries=1, task_default_queue=app.conf.task_default_queue)
    down.conf.broker_url = "sqs://test:test@127.0.0.1:9"
    down.conf.broker_transport_options = {  # one attempt: no botocore or kombu retries
        **down.conf.broker_transport_options,
        "client-config": {"retries": {"total_max_attempts": 1}},
        **{"max_retries": 1, "interval_start": 0, "interval_step": 0, "interval_max": 0},
    }

    with open_store(down) as store, pytest.raises(kombu.exceptions.OperationalError):
        store.move_all_due()

    assert redis_client.keys("*inflight*") == [] and redis_client.keys("*dead*") == []
    assert redis_client.keys("*tries*") == []
    app.set_current()
    assert deliver_all_due(app) == 3
    delivered = [m["headers"]["id"] for m in sqs_messages(app, app.conf.task_default_queue)]
    assert sorted(delivered) == sorted(r.id for r in sent)


class ThrottlingProxy:
    """An HTTP proxy in front of moto's SQS server that answers each ``SendMessage`` with
    the throttling reply SQS sends (``reply``: status, error code) while ``throttling``
    is set, and passes every other request through. moto cannot be made to throttle; the
    reply goes through botocore's own parsing, as a real SQS's would."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urllib.parse.urlsplit(upstream.replace("sqs://", "http://"))
        self.throttling = True
        self.reply = (400, "ThrottlingException")
        self.throttled = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.throttling and self.headers.get("X-Amz-Target", "").endswith(
                    ".SendMessage"
                ):
                    proxy.throttled += 1
                    status, code = proxy.reply
                    self.answer(status, *throttled_reply(code))
                    return
                upstream = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port)
                upstream.request("POST", self.path, body, dict(self.headers))
                reply = upstream.getresponse()
                self.answer(reply.status, dict(reply.getheaders()), reply.read())
                upstream.close()

            def answer(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in {"content-length", "connection", "date", "server"}:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                """Quiet."""

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = upstream.replace(f":{self.upstream.port}", f":{self.server.server_address[1]}")
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ThrottlingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join()
        self.server.server_close()


def throttled_reply(code: str) -> tuple[dict[str, str], bytes]:
    """The headers and body of an SQS JSON-protocol error reply with this code (a code of
    SQS's query protocol, ``AWS.SimpleQueueService.…``, rides in its own header)."""
    short = code.removeprefix("AWS.SimpleQueueService.")
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    if short != code:
        headers["x-amzn-query-error"] = f"{code};Sender"
    body = json.dumps({"__type": f"com.amazonaws.sqs#{short}", "message": "the proxy's reply"})
    return headers, body.encode()


@pytest.mark.parametrize(
    "reply",
    [
        (400, "ThrottlingException"),
        (400, "RequestThrottled"),
        (400, "AWS.SimpleQueueService.RequestThrottled"),
        (503, "ServiceUnavailable"),
    ],
)
@pytest.mark.promise("sqs-outage-charges-no-try")
def test_a_throttling_sqs_gives_the_batch_back_and_charges_no_message_a_try(
    make_sqs_app: Callable[..., Celery],
    sqs_server: str,
    redis_client: redis.Redis,
    reply: tuple[int, str],
) -> None:
    """SQS's "slow down" (a ``ClientError``, which kombu does not list among SQS's
    connection errors) and its server errors are an outage, not a refusal of the
    message: with one try allowed, no message is dead-lettered or charged a try, the pass
    fails (the mover backs off), and once SQS takes messages again every one arrives."""
    with ThrottlingProxy(sqs_server) as proxy:
        proxy.reply = reply
        app = make_sqs_app(delayq_handover_tries=1)
        app.conf.broker_url = proxy.url
        app.conf.broker_transport_options = {  # one attempt: no botocore retries
            **app.conf.broker_transport_options,
            "client-config": {"retries": {"total_max_attempts": 1}},
        }
        sent = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(3)]
        overdue(app, *sent)

        with open_store(app) as store, pytest.raises(SQSUnavailable) as raised:
            store.move_all_due()

        assert f"({reply[1]})" in str(raised.value)
        assert proxy.throttled == 1  # the batch stopped at its first message
        assert redis_client.keys("*dead*") == [] and redis_client.keys("*tries*") == []
        assert redis_client.keys("*inflight*") == []
        proxy.throttling = False
        assert deliver_all_due(app) == 3
        delivered = [m["headers"]["id"] for m in sqs_messages(app, app.conf.task_default_queue)]
        assert sorted(delivered) == sorted(r.id for r in sent)


@pytest.mark.promise("sqs-refusal-dead-lettered-alone")
def test_an_sqs_error_reply_about_the_message_is_still_its_refusal(
    make_sqs_app: Callable[..., Celery], sqs_server: str
) -> None:
    """The other side of the line drawn above: a client error that is no throttling
    (``InvalidMessageContents``) refuses the message, dead-lettered after its one try."""
    with ThrottlingProxy(sqs_server) as proxy:
        proxy.reply = (400, "InvalidMessageContents")
        app = make_sqs_app(delayq_handover_tries=1)
        app.conf.broker_url = proxy.url
        sent = app.send_task("tests.remember", countdown=3600)
        overdue(app, sent)

        (letter,) = dead_after_passes(app, 1)

    assert letter.task_id == sent.id
    assert "An error occurred (InvalidMessageContents) when calling" in letter.reason


# dead resend


@pytest.mark.promise("dead-letters-resent-or-dropped")
def test_dead_resend_counts_what_left_the_dead_letters_and_names_what_did_not(
    make_app: Callable[..., Celery], redis_client: redis.Redis
) -> None:
    """A dead letter whose record a move cannot read (as a move or ``doctor --repair``
    buries it) stays a dead letter: it is named, not counted, and the command exits 1;
    a readable one beside it is resent and delivered."""
    app = make_app()
    queue = app.conf.task_default_queue
    broken = app.send_task("tests.remember", countdown=3600)
    fine = app.send_task("tests.remember", countdown=3600)
    with open_store(app) as store:
        keys = store.keys.for_queue(queue)
        overdue(app, broken, fine)
        redis_client.hset(keys.messages, task_key(broken.id), b"12x:not a record")
        store.move_all_due()  # buries the unreadable record, delivers the other
        (buried,) = store.dead_letters()
        (payload,) = redis_client.lrange(queue, 0, -1)
        redis_client.delete(queue)
        store.add_dead_letter(
            queue, task_key(fine.id), Record(0, keys.own_list, payload), "refused"
        )

    result = invoke(app, "dead", "resend", "--all")

    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        "resent 1",
        f"still dead (not resent): {broken.id} of queue {queue}: {buried.reason}",
    ]
    assert buried.reason.startswith("unreadable record")
    delivered = [json.loads(raw)["headers"]["id"] for raw in redis_client.lrange(queue, 0, -1)]
    assert delivered == [fine.id]
    with open_store(app) as store:
        (still,) = store.dead_letters()
    assert (still.task_id, still.dead_at) == (broken.id, buried.dead_at)
    again = invoke(app, "dead", "resend", "--all", "--json")
    assert again.exit_code == 1
    assert json.loads(again.stdout) == {
        "resent": 0,
        "still_dead": [
            {"id": broken.id, "queue": queue, "why": "not resent", "reason": buried.reason}
        ],
    }
