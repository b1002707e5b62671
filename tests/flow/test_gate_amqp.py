"""Flow-control settings on another broker than Redis: the store keeps a limited task's
every message (diverter.py), but only the Redis broker's move (move_due.lua) reads gates;
the claim path (claim_due.lua) hands them over as if unlimited."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from celery import Celery

from celery_delayq.config.errors import ConfigurationError
from celery_delayq.ops.api import deliver_all_due

from ..helpers import take_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


@pytest.mark.xfail(
    strict=True,
    reason="finding: on RabbitMQ a rate limit is accepted, every message of the task is kept "
    "in the store (even with no ETA), and all are handed over at once: the limit is not held",
)
def test_a_rate_limit_on_rabbitmq_is_held_or_refused(make_amqp_app: Callable[..., Celery]):
    app = make_amqp_app(delayq_rate_limits={"tests.remember": "1/m"})
    try:
        for n in range(3):
            app.send_task("tests.remember", (n,))
    except ConfigurationError:
        return  # refused: an answer too
    deliver_all_due(app)
    assert len(take_all(app, app.conf.task_default_queue)) <= 1
