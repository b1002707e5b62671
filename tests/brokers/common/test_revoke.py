"""``app.control.revoke`` cancels pending delayed tasks in the store (no worker needed), on
a Redis broker and on RabbitMQ; other broadcasts pass untouched."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery

from celery_delayq.brokers.connect import open_store

from ...helpers import noop_task

pytestmark = pytest.mark.integration


@pytest.fixture(params=["redis", "amqp"])
def revoke_app(request, make_app, make_amqp_app) -> Iterator[Celery]:
    yield make_app() if request.param == "redis" else make_amqp_app()


def pending_ids(app: Celery) -> set[str]:
    with open_store(app) as store:
        return {message.task_id for message in store.pending(limit=100)}


def test_revoke_cancels_delayed_tasks_one_id_or_a_list(revoke_app: Celery) -> None:
    task = noop_task(revoke_app)
    first, second, third = (task.apply_async((n,), countdown=600).id for n in range(3))
    assert pending_ids(revoke_app) == {first, second, third}

    revoke_app.control.revoke([first, second])
    assert pending_ids(revoke_app) == {third}
    revoke_app.control.revoke(third, terminate=False)
    assert pending_ids(revoke_app) == set()


def test_other_broadcasts_and_unknown_ids_leave_the_store_alone(revoke_app: Celery) -> None:
    task = noop_task(revoke_app)
    kept = task.apply_async((1,), countdown=600).id
    revoke_app.control.revoke("not-a-pending-task")
    revoke_app.control.broadcast("ping")
    revoke_app.control.rate_limit("tests.noop", "1/s")
    assert pending_ids(revoke_app) == {kept}
