"""A RabbitMQ that stops answering a mover while its connection stays open (a proxy drops
the broker's bytes): the move gives up after the wait for answers (half the lease), every
claim comes back without a try charged, and once the broker answers again a new
connection delivers every message (real RabbitMQ, real Redis)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

import pytest
import redis
from celery import Celery
from kombu import Exchange, Queue

import celery_delayq
from celery_delayq.brokers.amqp.publisher import ConfirmTimeout, ConnectionGivenUp
from celery_delayq.brokers.common.message import STABLE_ID_HEADER
from celery_delayq.brokers.connect import open_store

from ...helpers import take_all
from ...muting_proxy import MutingProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

LEASE = 2.0  # movers wait for the broker's answers half of it: 1 s
MESSAGES = 5
#: One try: a hand-over charged a try would dead-letter its message at once.
SETTINGS = {"delayq_handover_lease": LEASE, "delayq_handover_tries": 1}


@pytest.fixture
def proxy(rabbitmq_url: str) -> Iterator[MutingProxy]:
    parts = urlparse(rabbitmq_url)
    with MutingProxy((parts.hostname or "127.0.0.1", parts.port or 5672)) as proxy:
        yield proxy


@pytest.fixture
def apps(
    make_amqp_app: Callable[..., Celery],
    app_factory: Callable[..., Celery],
    amqp_settings: dict[str, Any],
    rabbitmq_url: str,
    proxy: MutingProxy,
) -> tuple[Celery, Celery]:
    """An app on RabbitMQ, and the same app reaching RabbitMQ through the proxy (its
    movers)."""
    app = make_amqp_app(**SETTINGS)
    through = app_factory(proxy.url(rabbitmq_url), **amqp_settings, **SETTINGS)
    app.set_current()
    return app, through


def overdue(app: Celery, *results: Any) -> None:
    for result in results:
        assert celery_delayq.reschedule(app, result.id, countdown=-1) == 1


def silenced_then_answering(
    apps: tuple[Celery, Celery],
    proxy: MutingProxy,
    redis_client: redis.Redis,
    first: Any,
    later: list[Any],
    match: str,
) -> None:
    """Deliver ``first`` through the proxy (the mover connects), then move ``later``
    while the broker's answers are dropped: the move gives up (ConfirmTimeout) after the
    wait for answers, on the connection it had, and every claim comes back, due at once,
    charged no try (none dead-lettered). Once the broker answers again, a new connection
    delivers them."""
    app, through = apps
    overdue(app, first)
    with open_store(through) as store:
        assert store.move_all_due().moved == 1
        overdue(app, *later)
        proxy.muted = True
        started = time.monotonic()
        with pytest.raises(ConfirmTimeout, match=match):
            store.move_all_due()
        assert LEASE / 2 <= time.monotonic() - started < LEASE / 2 + 10  # a generous bound
        assert proxy.accepted == 1
        proxy.muted = False
        backlog = celery_delayq.backlog(app)
        assert [(b.pending, b.overdue, b.in_flight, b.dead) for b in backlog] == [
            (len(later), len(later), 0, 0)
        ]
        assert redis_client.keys("*inflight*") == [] and redis_client.keys("*claims*") == []

        assert store.move_all_due().moved == len(later)
        assert proxy.accepted == 2  # the silent connection was dropped, a new one made


@pytest.mark.promise("handover-silent-broker-returns-claims")
def test_a_broker_silent_at_an_exchange_look_up_loses_nothing_and_publishes_nothing_twice(
    apps: tuple[Celery, Celery], proxy: MutingProxy, redis_client: redis.Redis
) -> None:
    """The first publish to an exchange on a connection waits for its look-up (a passive
    declare), whose answer never comes: nothing was published, so the next pass, on a
    new connection, delivers each message once."""
    app, _ = apps
    queue = app.conf.task_default_queue
    seen, unseen = (Exchange(f"{queue}-{name}", type="direct") for name in ("seen", "unseen"))
    with app.connection_for_write() as connection:
        for exchange in (seen, unseen):
            Queue(queue, exchange, routing_key=queue)(connection.default_channel).declare()
    first = app.send_task("tests.remember", countdown=3600, exchange=seen.name, routing_key=queue)
    later = [
        app.send_task(
            "tests.remember", (i,), countdown=3600, exchange=unseen.name, routing_key=queue
        )
        for i in range(MESSAGES)
    ]
    # the look-ups' channel is open (seen was looked up): the wait is the declare's
    silenced_then_answering(
        apps, proxy, redis_client, first, later, match=f"look-up of exchange '{unseen.name}'"
    )

    arrived = Counter(m.headers["id"] for m in take_all(app, queue))
    assert arrived == Counter(r.id for r in [first, *later])  # each exactly once


@pytest.mark.promise("handover-silent-broker-returns-claims", "handover-stable-id")
def test_a_broker_silent_before_its_confirms_loses_nothing(
    apps: tuple[Celery, Celery], proxy: MutingProxy, redis_client: redis.Redis
) -> None:
    """The batch is published (the broker gets it, and may route it), its confirms never
    come: the claims come back unconfirmed and the next pass publishes the batch again,
    so a message may arrive twice, both copies with the same stable id."""
    app, _ = apps
    queue = app.conf.task_default_queue
    first = app.send_task("tests.remember", countdown=3600)  # to the default exchange
    later = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(MESSAGES)]
    silenced_then_answering(
        apps, proxy, redis_client, first, later, match=f"did not confirm {MESSAGES} message"
    )

    arrived = take_all(app, queue)
    copies = Counter(m.headers["id"] for m in arrived)
    assert set(copies) == {r.id for r in [first, *later]}  # nothing lost
    assert copies[first.id] == 1 and all(copies[r.id] <= 2 for r in later)
    for result in later:
        stable = {m.headers[STABLE_ID_HEADER] for m in arrived if m.headers["id"] == result.id}
        assert len(stable) == 1


def test_a_store_closes_while_the_broker_is_silent(
    apps: tuple[Celery, Celery], proxy: MutingProxy
) -> None:
    """A mover that stops closes its connection with the broker's handshake, each wait of
    it bounded by the wait for answers: a silent broker does not keep it from stopping."""
    app, through = apps
    overdue(app, app.send_task("tests.remember", countdown=3600))
    with open_store(through) as store:
        assert store.move_all_due().moved == 1  # connected
        proxy.muted = True
        started = time.monotonic()
    assert time.monotonic() - started < 3 * LEASE / 2 + 10  # channel, connection: returned


@pytest.mark.promise("handover-silent-broker-returns-claims")
def test_a_batch_awaited_on_a_connection_given_up_is_not_sent_on_a_new_one(
    app_factory: Callable[..., Celery],
    make_amqp_app: Callable[..., Celery],
    amqp_settings: dict[str, Any],
    rabbitmq_url: str,
    proxy: MutingProxy,
    redis_client: redis.Redis,
) -> None:
    """In a backlog a mover sends the next batch before the first one's confirms come:
    here that next batch's exchange look-up finds the broker silent, and the connection
    is given up. The first batch, sent on it, is then not sent again on a new connection
    (which the silent broker would keep waiting for its handshake): its claims come back
    in the same pass, and the next pass delivers every message."""
    fixed = {**SETTINGS, "delayq_move_batch_size": MESSAGES, "delayq_move_call_budget": 0}
    app = make_amqp_app(**fixed)
    through = app_factory(proxy.url(rabbitmq_url), **amqp_settings, **fixed)
    app.set_current()
    queue = app.conf.task_default_queue
    unseen = Exchange(f"{queue}-unseen", type="direct")
    with app.connection_for_write() as connection:
        Queue(queue, unseen, routing_key=queue)(connection.default_channel).declare()
    first = app.send_task("tests.remember", countdown=3600)
    ahead = [app.send_task("tests.remember", (i,), countdown=3600) for i in range(MESSAGES)]
    behind = [
        app.send_task(
            "tests.remember", (i,), countdown=3600, exchange=unseen.name, routing_key=queue
        )
        for i in range(MESSAGES)
    ]
    overdue(app, first)
    with open_store(through) as store:
        assert store.move_all_due().moved == 1  # connected; the default exchange looked up
        for results, countdown in ((ahead, -2), (behind, -1)):  # ahead: the first batch
            for result in results:
                assert celery_delayq.reschedule(app, result.id, countdown=countdown) == 1
        proxy.muted = True
        with pytest.raises(ConnectionGivenUp, match="ConfirmTimeout: .* look-up of exchange"):
            store.move_all_due()
        assert proxy.accepted == 1  # no new connection was tried in that pass
        proxy.muted = False
        backlog = celery_delayq.backlog(app)
        assert [(b.pending, b.overdue, b.in_flight, b.dead) for b in backlog] == [
            (2 * MESSAGES, 2 * MESSAGES, 0, 0)
        ]
        assert store.move_all_due().moved == 2 * MESSAGES
        assert proxy.accepted == 2

    arrived = Counter(m.headers["id"] for m in take_all(app, queue))
    assert set(arrived) == {r.id for r in [first, *ahead, *behind]}  # nothing lost
    assert all(arrived[r.id] == 1 for r in [first, *behind])  # behind was never published
    assert all(arrived[r.id] <= 2 for r in ahead)  # routed, unconfirmed: may come twice
