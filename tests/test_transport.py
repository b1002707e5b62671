"""Publishing through the transport: what is diverted to the store, and what is refused."""

from __future__ import annotations

import base64
import json
import math
import threading
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery.utils.time import maybe_iso8601, maybe_make_aware
from kombu.exceptions import OperationalError
from kombu.utils.json import dumps

import celery_delayq
from celery_delayq import ConfigurationError, InvalidETA
from celery_delayq.connect import open_store
from celery_delayq.record import Record, task_id_of, task_key
from celery_delayq.testing import RedisServer

RECORDS = "delayq:{default}:msg"


def task_of(app):
    if "tests.noop" in app.tasks:
        return app.tasks["tests.noop"]

    @app.task(name="tests.noop")
    def noop(*args):
        return args

    return noop


def test_a_future_countdown_is_stored_not_queued(app, redis_client):
    result = task_of(app).apply_async(countdown=60)

    assert redis_client.llen("default") == 0
    assert celery_delayq.backlog(app)[0].pending == 1
    assert redis_client.hexists(RECORDS, task_key(result.id))


@pytest.mark.parametrize(
    "options",
    [{}, {"countdown": 0}, {"countdown": -5},
     {"eta": datetime.now(timezone.utc) - timedelta(seconds=10)}],
    ids=["no eta", "countdown 0", "negative countdown", "past eta"],
)  # fmt: skip
def test_messages_without_a_future_eta_are_queued_at_once_as_vanilla(app, redis_client, options):
    task_of(app).apply_async(**options)
    assert redis_client.llen("default") == 1
    assert redis_client.hlen(RECORDS) == 0


def test_a_malformed_eta_is_a_clear_error_and_writes_nothing(app, redis_client):
    before = set(redis_client.keys("*"))
    with pytest.raises(InvalidETA, match="invalid eta 'next tuesday'"):
        task_of(app).apply_async(eta="next tuesday")
    new_keys = set(redis_client.keys("*")) - before
    assert not [k for k in new_keys if not k.startswith(b"_kombu.binding")]


def test_an_eta_header_of_the_wrong_type_is_refused(app, redis_client):
    with app.producer_or_acquire() as producer:
        with pytest.raises(InvalidETA, match="must be an ISO 8601 string, got int"):
            producer.publish({}, routing_key="default", headers={"eta": 12345}, retry=False)
    assert redis_client.hlen(RECORDS) == 0


def test_a_naive_eta_means_what_it_means_to_a_vanilla_worker(make_app, redis_client):
    """Celery 5.7's worker reads a naive ETA header as UTC (``maybe_make_aware``), even
    with ``enable_utc=False`` and another ``timezone``; the store reads it the same way."""
    app = make_app(timezone="America/New_York", enable_utc=False)
    naive_utc = (datetime.now(timezone.utc) + timedelta(hours=2)).replace(tzinfo=None)
    task_of(app).apply_async(eta=naive_utc)

    with open_store(app) as store:
        (stored,) = store.pending()
    worker_view = maybe_make_aware(maybe_iso8601(naive_utc.isoformat()), app.conf.timezone)
    assert stored.due * 1000 == math.ceil(worker_view.timestamp() * 1000)

    # New York wall-clock time two hours ahead is already past in UTC: a vanilla worker
    # runs it at once, so it is queued at once.
    naive_new_york = (datetime.now(ZoneInfo("America/New_York")) + timedelta(hours=2)).replace(
        tzinfo=None
    )
    task_of(app).apply_async(eta=naive_new_york)
    assert redis_client.llen("default") == 1


def test_the_stored_payload_is_exactly_what_kombu_would_have_queued(app, redis_client):
    big = 12345678901234567
    task_of(app).apply_async((big, "é"), countdown=60, priority=5)
    ((key, raw),) = redis_client.hgetall("delayq:{default}:msg").items()
    record = Record.decode(raw, "default")
    message = json.loads(record.payload)
    assert message["headers"]["task"] == "tests.noop"
    assert task_id_of(key) == message["headers"]["id"]
    assert b"12345678901234567" in base64.b64decode(message["body"])
    assert record.payload == dumps(message).encode()  # kombu's own serialisation
    # Priority 5 goes to the list of kombu's step 3, as kombu's _q_for_pri picks it.
    assert record.destination == "default\x06\x163"


def test_priorities_and_global_keyprefix_choose_the_destination_list(make_app, redis_client):
    app = make_app(broker_transport_options={"global_keyprefix": "tenant1:"})
    task_of(app).apply_async(countdown=60, priority=9)
    task_of(app).apply_async(countdown=60)

    records = redis_client.hvals("tenant1:delayq:{default}:msg")
    destinations = sorted(Record.decode(raw, "tenant1:default").destination for raw in records)
    assert destinations == ["tenant1:default", "tenant1:default\x06\x169"]
    assert not redis_client.exists("delayq:queues")


def test_a_non_redis_broker_url_is_refused_at_start(make_app):
    app = make_app(url="amqp://guest@localhost:5672//")
    with pytest.raises(ConfigurationError, match="needs a .*redis.* broker URL"):
        task_of(app).apply_async(countdown=5)


def test_rediss_without_ssl_settings_is_refused_at_start(make_app):
    app = make_app(url="rediss://localhost:6380/0")
    with pytest.raises(ConfigurationError, match="broker_use_ssl"):
        with app.connection_for_write() as connection:
            connection.default_channel  # noqa: B018


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [("delayq_move_batch_size", 0, "integer from 1 to 10000"),
     ("delayq_mover_max_sleep", "soon", "number of seconds"),
     ("delayq_worker_mover", "yes", "True or False"),
     ("delayq_key_prefix", "", "non-empty string"),
     ("delayq_batch", 10, "unknown celery-delayq setting 'delayq_batch'")],
)  # fmt: skip
def test_bad_settings_are_refused_with_a_clear_error(make_app, setting, value, message):
    app = make_app(**{setting: value})
    with pytest.raises(ConfigurationError, match=message):
        task_of(app).apply_async(countdown=5)


def test_settings_are_read_from_a_django_style_namespace(make_app, redis_server, redis_client):
    class Settings:
        CELERY_BROKER_URL = redis_server.url
        CELERY_BROKER_TRANSPORT = "celery_delayq.transport:Transport"
        CELERY_TASK_DEFAULT_QUEUE = "default"
        CELERY_DELAYQ_KEY_PREFIX = "django-delayed"

    app = make_app()
    app.config_from_object(Settings, namespace="CELERY")
    task_of(app).apply_async(countdown=60)
    assert redis_client.hlen("django-delayed:{default}:msg") == 1


def test_redis_down_while_publishing_raises_kombus_error_and_leaves_nothing(make_app):
    with RedisServer() as server:
        app = make_app(url=server.url)
        task_of(app).apply_async(countdown=60)
        server.stop(kill=True)

        with pytest.raises(OperationalError):
            task_of(app).apply_async(countdown=60, retry=False)

        server.start()
        assert server.client().hlen(RECORDS) == 0  # no AOF: the server restarted empty


def test_publish_retry_policy_applies_while_redis_is_down(make_app):
    with RedisServer(appendonly=True) as server:
        app = make_app(url=server.url)
        task_of(app).apply_async(countdown=60)
        server.stop()
        threading.Timer(1.0, server.start).start()

        task_of(app).apply_async(
            countdown=60, retry=True,
            retry_policy={"max_retries": 30, "interval_start": 0.2, "interval_step": 0.2,
                          "interval_max": 0.5},
        )  # fmt: skip
        assert server.client().hlen(RECORDS) == 2


def test_an_eta_in_year_9999_is_stored_and_listed(app, redis_client):
    task_of(app).apply_async(eta=datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc))
    (backlog,) = celery_delayq.backlog(app)
    assert backlog.pending == 1
    assert backlog.next_due == datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()


def test_a_publish_from_another_thread_uses_the_apps_own_settings(make_app, redis_client):
    """In a thread that did not create the app, current_app is Celery's empty fallback
    app; the channel must still take its settings from the app that uses the transport."""
    app = make_app(delayq_key_prefix="custom")
    task = task_of(app)
    publisher = threading.Thread(target=lambda: task.apply_async(countdown=60))
    publisher.start()
    publisher.join()
    task.apply_async(countdown=60)  # the main thread may reuse the thread's pooled channel

    assert redis_client.hlen("custom:{default}:msg") == 2
    assert celery_delayq.backlog(app)[0].pending == 2


def test_two_apps_with_different_settings_need_the_publisher_to_be_current(make_app):
    first = make_app(delayq_key_prefix="one")
    make_app(delayq_key_prefix="two")
    outcome: list[BaseException] = []

    def publish() -> None:
        try:
            task_of(first).apply_async(countdown=60)
        except ConfigurationError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    thread.join()
    assert "make the publishing app current" in str(outcome[0])
