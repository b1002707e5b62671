"""Operating a RabbitMQ app's delayed store: dead letters in ``list --dead``, ``status``,
``doctor``, sent again once the cause is fixed or dropped; ``doctor``'s broker checks.
(Real RabbitMQ, real Redis; the CLI runs in-process.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from celery import Celery
from kombu import Exchange, Queue

import celery_delayq
from celery_delayq.ops.api import deliver_all_due

from ...helpers import invoke

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def dead_lettered(app: Celery) -> Any:
    """Send one task to an exchange with no binding (of this test's own: exchanges
    outlive a test in the vhost) and let it fail until it is dead."""
    exchange = orphans(app)
    with app.connection_for_write() as connection:
        exchange(connection.default_channel).declare()
    sent = app.send_task("tests.remember", countdown=3600, exchange=exchange.name, routing_key="r")
    assert celery_delayq.reschedule(app, sent.id, countdown=-1) == 1
    assert deliver_all_due(app) == 0  # one try: dead at once (delayq_handover_tries=1)
    return sent


def orphans(app: Celery) -> Exchange:
    return Exchange(f"orphans-{app.conf.task_default_queue}", type="direct")


def findings(app: Celery) -> dict[str, dict[str, Any]]:
    report = json.loads(invoke(app, "doctor", "--json").output)
    return {finding["check"]: finding for finding in report["findings"]}


@pytest.mark.promise("dead-letters-shown", "dead-letters-resent-or-dropped")
def test_a_dead_letter_shows_everywhere_and_is_delivered_once_its_cause_is_fixed(
    make_amqp_app: Callable[..., Celery],
) -> None:
    app = make_amqp_app(delayq_handover_tries=1)
    sent = dead_lettered(app)

    (listed,) = json.loads(invoke(app, "list", "--dead", "--json").output)
    assert (listed["id"], listed["queue"], listed["tries"]) == (sent.id, "r", 1)
    assert listed["reason"].startswith("unroutable: ")
    (queue,) = json.loads(invoke(app, "status", "--json").output)["queues"]
    assert (queue["pending"], queue["dead"], queue["in_flight"]) == (0, 1, 0)
    assert "1 dead letter(s)" in invoke(app, "status").output
    found = findings(app)
    assert found["dead letters"]["level"] == "warn" and "r (1)" in found["dead letters"]["message"]
    assert found["broker"]["level"] == "ok"
    assert found["publisher confirms"]["level"] == "warn"  # producers publish without

    target = Queue(f"found-{orphans(app).name}", orphans(app), routing_key="r")
    with app.connection_for_write() as connection:
        target(connection.default_channel).declare()  # the cause, fixed: a binding
    resent = invoke(app, "dead", "resend", "--all", "--json")
    assert json.loads(resent.output) == {"resent": 1, "still_dead": []}

    with app.connection_for_write() as connection:
        message = connection.default_channel.basic_get(target.name, no_ack=True)
    assert message is not None and message.headers["id"] == sent.id
    assert celery_delayq.backlog(app)[0].dead == 0


@pytest.mark.promise("dead-letters-resent-or-dropped")
def test_dead_letters_are_dropped_only_when_asked(make_amqp_app: Callable[..., Celery]) -> None:
    app = make_amqp_app(delayq_handover_tries=1)
    sent = dead_lettered(app)

    assert invoke(app, "dead", "drop").exit_code == 2  # neither ids nor --all
    assert invoke(app, "dead", "drop", sent.id, input="n\n").exit_code == 1
    assert celery_delayq.backlog(app)[0].dead == 1
    dropped = invoke(app, "dead", "drop", sent.id, "--yes", "--json")
    assert json.loads(dropped.output) == {"dropped": 1}
    assert json.loads(invoke(app, "list", "--dead", "--json").output) == []


@pytest.mark.promise("movers-publish-with-confirms", "doctor-checks-broker")
def test_doctor_fails_when_the_broker_cannot_be_reached_and_sees_confirms(
    app_factory: Callable[..., Celery], amqp_settings: dict[str, Any]
) -> None:
    app = app_factory(
        "amqp://guest:guest@127.0.0.1:9//",
        **amqp_settings,
        broker_transport_options={"confirm_publish": True},
    )
    found = findings(app)
    assert found["broker"]["level"] == "fail" and "unreachable" in found["broker"]["message"]
    assert found["publisher confirms"]["level"] == "ok"
    assert found["dead letters"]["level"] == "ok"


def test_every_task_command_works_on_rabbitmq(make_amqp_app: Callable[..., Celery]) -> None:
    """list, show, reschedule, promote, cancel and purge act on the store at
    delayq_store_url; promote hands over to RabbitMQ at once."""
    app = make_amqp_app()
    queue = app.conf.task_default_queue
    kept, cancelled, promoted = (
        app.send_task("tests.remember", (name,), countdown=3600)
        for name in ("kept", "cancelled", "promoted")
    )

    listed = json.loads(invoke(app, "list", "--json").output)
    assert sorted(m["id"] for m in listed) == sorted(r.id for r in (kept, cancelled, promoted))
    (shown,) = json.loads(invoke(app, "show", "--json", kept.id).output)
    assert (shown["task"], shown["queue"]) == ("tests.remember", queue)
    assert invoke(app, "reschedule", kept.id, "--countdown", "7200").exit_code == 0
    assert invoke(app, "cancel", cancelled.id).exit_code == 0
    assert invoke(app, "promote", promoted.id).exit_code == 0

    with app.connection_for_write() as connection:
        message = connection.default_channel.basic_get(queue, no_ack=True)
    assert message is not None and message.headers["id"] == promoted.id
    assert json.loads(invoke(app, "purge", "--yes", "--json").output) == {queue: 1}
    assert celery_delayq.backlog(app) == []
