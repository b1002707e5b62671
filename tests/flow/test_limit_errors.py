"""A limit that cannot be used is refused where it is written: a bad setting stops the
worker at start, a bad task option or a limit key on a task without limits fails the
publish, and nothing reaches the broker or the store."""

from __future__ import annotations

import pytest
import redis

from celery_delayq import InvalidLimit
from celery_delayq.config.errors import ConfigurationError
from celery_delayq.config.settings import config_of

from ..helpers import run_celery

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


def written(client: redis.Redis) -> list[bytes]:
    """The keys of the server, but kombu's declared bindings."""
    return [key for key in client.keys("*") if not key.startswith(b"_kombu.binding")]


@pytest.mark.promise("flow-bad-limit-refused")
def test_a_bad_rate_in_the_settings_stops_the_worker_at_start(make_app, redis_server):
    settings = {"delayq_rate_limits": {"tests.worker_app.paced": "fast"}}
    with pytest.raises(ConfigurationError, match="'fast' is not a rate limit"):
        config_of(make_app(**settings))

    ended = run_celery(redis_server.url, settings, "worker", "-P", "solo", "--without-mingle")
    assert ended.returncode != 0
    assert "ConfigurationError: delayq_rate_limits['tests.worker_app.paced']" in ended.stderr
    assert "'fast' is not a rate limit" in ended.stderr


@pytest.mark.promise("flow-bad-limit-refused")
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"delayq_rate_limit": "10 per second"}, "is not a rate limit"),
        ({"delayq_rate_limit": []}, "an empty list of rates"),
        ({"delayq_concurrency": 0}, "a concurrency limit is an integer"),
    ],
)
def test_a_bad_task_option_fails_the_publish(app, redis_client, options, message):
    @app.task(name="tests.flow.badly_limited", shared=False, **options)
    def badly_limited() -> None:
        """Never runs."""

    with pytest.raises(InvalidLimit, match=message):
        badly_limited.apply_async()
    assert written(redis_client) == [], "no message in the queue or the store"


@pytest.mark.promise("flow-bad-limit-refused")
def test_a_limit_key_on_a_task_without_limits_fails_the_publish(app, redis_client):
    @app.task(name="tests.flow.unlimited", shared=False)
    def unlimited() -> None:
        """Never runs."""

    with pytest.raises(InvalidLimit, match="has no rate or concurrency limit"):
        unlimited.apply_async(headers={"delayq_limit_key": "cust-42"})
    assert written(redis_client) == [], "no message in the queue or the store"


@pytest.mark.promise("flow-bad-limit-refused")
def test_a_limit_key_argument_too_long_fails_the_publish(app, redis_client):
    @app.task(
        name="tests.flow.keyed_by_argument",
        shared=False,
        delayq_rate_limit="1/s",
        delayq_limit_key="customer_id",
    )
    def keyed_by_argument(customer_id: str) -> None:
        """Never runs."""

    with pytest.raises(InvalidLimit, match="a limit key is at most 512 bytes"):
        keyed_by_argument.delay("x" * 513)
    assert written(redis_client) == [], "no message in the queue or the store"
