"""Publishing through the transport: what is diverted to the store, and what is refused."""

from __future__ import annotations

import base64
import json
import math
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.utils.time import maybe_iso8601, maybe_make_aware
from kombu.exceptions import OperationalError
from kombu.utils.json import dumps

import celery_delayq
from celery_delayq import InvalidETA
from celery_delayq.brokers.connect import open_store
from celery_delayq.core.layout.record import Record, task_id_of, task_key
from celery_delayq.testing import RedisServer

from ..helpers import noop_task, remember

pytestmark = pytest.mark.integration

RECORDS = "delayq:{default}:msg"


#: A fresh process's first delayed publish: what it imported of celery-delayq.
FIRST_PUBLISH = """
import sys
from celery import Celery
app = Celery("first", broker=sys.argv[1], set_as_current=True)
app.conf.broker_transport = "celery_delayq.transport:Transport"
app.send_task("first.publish", countdown=60)
print(" ".join(sorted(name for name in sys.modules if name.startswith("celery_delayq"))))
"""


def test_the_first_delayed_publish_imports_only_what_a_publish_needs(redis_server, redis_client):
    # A fresh interpreter: this test process has long imported everything.
    loaded = subprocess.run(
        [sys.executable, "-c", FIRST_PUBLISH, redis_server.url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert "celery_delayq.core.store.writes" in loaded  # it did store the message
    assert [key for key in redis_client.keys("*delayq*:msg")], "nothing stored"
    never = {"handover", "heartbeats", "results", "delay_keys", "mover", "store.moves"}
    never |= {f"store.{facet}" for facet in ("listing", "counts", "admin", "dead_letters")}
    never |= {"store.changes", "store.ahead", "backoff"}
    unneeded = {f"celery_delayq.core.{name}" for name in never}
    unneeded |= {"celery_delayq.ops", "celery_delayq.scheduling", "celery_delayq.periodic"}
    unneeded |= {"celery_delayq.brokers.common.separate_store"}
    unneeded |= {f"celery_delayq.brokers.redis.{name}" for name in ("consume", "landing")}
    unneeded |= {"celery_delayq.brokers.redis.list_publisher", "celery_delayq.core.replicated"}
    unneeded |= {"celery_delayq.brokers.common.revoke", "celery_delayq.worker"}
    assert unneeded.isdisjoint(loaded), sorted(unneeded.intersection(loaded))


@pytest.mark.promise("scheduled-means-stored")
def test_a_future_countdown_is_stored_not_queued(app, redis_client):
    result = noop_task(app).apply_async(countdown=60)

    assert redis_client.llen("default") == 0
    assert celery_delayq.backlog(app)[0].pending == 1
    assert redis_client.hexists(RECORDS, task_key(result.id))


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"countdown": 0},
        {"countdown": -5},
        {"eta": datetime.now(timezone.utc) - timedelta(seconds=10)},
    ],
    ids=["no eta", "countdown 0", "negative countdown", "past eta"],
)
def test_messages_without_a_future_eta_are_queued_at_once_as_vanilla(app, redis_client, options):
    noop_task(app).apply_async(**options)
    assert redis_client.llen("default") == 1
    assert redis_client.hlen(RECORDS) == 0


@pytest.mark.promise("malformed-eta-refused")
def test_a_malformed_eta_is_a_clear_error_and_writes_nothing(app, redis_client):
    before = set(redis_client.keys("*"))
    with pytest.raises(InvalidETA, match="invalid eta 'next tuesday'"):
        noop_task(app).apply_async(eta="next tuesday")
    new_keys = set(redis_client.keys("*")) - before
    assert not [k for k in new_keys if not k.startswith(b"_kombu.binding")]


@pytest.mark.promise("malformed-eta-refused")
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
    noop_task(app).apply_async(eta=naive_utc)

    with open_store(app) as store:
        (stored,) = store.pending()
    worker_view = maybe_make_aware(maybe_iso8601(naive_utc.isoformat()), app.conf.timezone)
    assert stored.due * 1000 == math.ceil(worker_view.timestamp() * 1000)

    # New York wall-clock time two hours ahead is already past in UTC: a vanilla worker
    # runs it at once, so it is queued at once.
    naive_new_york = (datetime.now(ZoneInfo("America/New_York")) + timedelta(hours=2)).replace(
        tzinfo=None
    )
    noop_task(app).apply_async(eta=naive_new_york)
    assert redis_client.llen("default") == 1


def test_the_stored_payload_is_exactly_what_kombu_would_have_queued(app, redis_client):
    big = 12345678901234567
    noop_task(app).apply_async((big, "é"), countdown=60, priority=5)
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
    noop_task(app).apply_async(countdown=60, priority=9)
    noop_task(app).apply_async(countdown=60)

    records = redis_client.hvals("tenant1:delayq:{default}:msg")
    destinations = sorted(Record.decode(raw, "tenant1:default").destination for raw in records)
    assert destinations == ["tenant1:default", "tenant1:default\x06\x169"]
    assert not redis_client.exists("delayq:queues")


def test_settings_are_read_from_a_django_style_namespace(make_app, redis_server, redis_client):
    class Settings:
        CELERY_BROKER_URL = redis_server.url
        CELERY_BROKER_TRANSPORT = "celery_delayq.transport:Transport"
        CELERY_TASK_DEFAULT_QUEUE = "default"
        CELERY_DELAYQ_KEY_PREFIX = "django-delayed"

    app = make_app()
    app.config_from_object(Settings, namespace="CELERY")
    noop_task(app).apply_async(countdown=60)
    assert redis_client.hlen("django-delayed:{default}:msg") == 1


@pytest.mark.promise("scheduled-means-stored", "store-down-publish-fails-clean")
def test_redis_down_while_publishing_raises_kombus_error_and_leaves_nothing(make_app):
    with RedisServer() as server:
        app = make_app(url=server.url)
        noop_task(app).apply_async(countdown=60)
        server.stop(kill=True)

        with pytest.raises(OperationalError):
            noop_task(app).apply_async(countdown=60, retry=False)

        server.start()
        assert server.client().hlen(RECORDS) == 0  # no AOF: the server restarted empty


@pytest.mark.promise("scheduled-means-stored")
def test_publish_retry_policy_applies_while_redis_is_down(make_app):
    with RedisServer(appendonly=True) as server:
        app = make_app(url=server.url)
        noop_task(app).apply_async(countdown=60)
        server.stop()
        failed: list[BaseException] = []

        def redis_comes_back(exc: BaseException, interval: float) -> None:
            """kombu calls this after each failed attempt, before the retry."""
            failed.append(exc)
            if len(failed) == 2:  # after the first attempt and a first retry
                server.start()

        noop_task(app).apply_async(
            countdown=60,
            retry=True,
            retry_policy={
                "max_retries": 30,
                "interval_start": 0.2,
                "interval_step": 0.2,
                "interval_max": 0.5,
                "errback": redis_comes_back,
            },
        )
        assert len(failed) == 2, failed
        assert server.client().hlen(RECORDS) == 2


def test_an_eta_in_year_9999_is_stored_and_listed(app, redis_client):
    noop_task(app).apply_async(eta=datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc))
    (backlog,) = celery_delayq.backlog(app)
    assert backlog.pending == 1
    assert backlog.next_due == datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone.utc).timestamp()


def test_a_publish_from_another_thread_uses_the_apps_own_settings(make_app, redis_client):
    """In a thread that did not create the app, current_app is Celery's empty fallback
    app; the channel must still take its settings from the app that uses the transport."""
    app = make_app(delayq_key_prefix="custom")
    task = noop_task(app)
    publisher = threading.Thread(target=lambda: task.apply_async(countdown=60))
    publisher.start()
    publisher.join()
    task.apply_async(countdown=60)  # the main thread may reuse the thread's pooled channel

    assert redis_client.hlen("custom:{default}:msg") == 2
    assert celery_delayq.backlog(app)[0].pending == 2


def test_a_channel_takes_the_settings_of_the_app_whose_broker_it_connects_to(
    make_app, redis_client
):
    """Several celery-delayq apps in one process, none current in the publishing thread:
    the app whose broker the channel connects to gives the settings (a Django site's app
    and a test's, say), not an error."""
    make_app(url="redis://127.0.0.1:1/0", delayq_key_prefix="elsewhere")  # never connected
    app = make_app(delayq_key_prefix="mine")
    task = noop_task(app)
    publisher = threading.Thread(target=lambda: task.apply_async(countdown=60))
    publisher.start()
    publisher.join()

    assert redis_client.hlen("mine:{default}:msg") == 1


@pytest.mark.xfail(
    strict=True,
    reason="kombu's producer pool is keyed by broker URL and transport options, so app B "
    "publishes on a pooled channel that took app A's delayq settings when it was built",
)
def test_two_apps_sharing_broker_settings_in_one_process_keep_their_own_delayq_prefix(
    make_app: Callable[..., Celery],
) -> None:
    a = make_app(delayq_key_prefix="dqa")
    b = make_app(delayq_key_prefix="dqb")
    remember(a, "a", countdown=600)
    sent = remember(b, "b", countdown=600)

    b.set_current()
    assert [q.pending for q in celery_delayq.backlog(b)] == [1]
    assert celery_delayq.cancel(b, sent.id) == 1
