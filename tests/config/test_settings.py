"""Settings and broker URLs are validated before anything reaches Redis: these apps
point at an address where no server listens."""

from __future__ import annotations

import dataclasses
import re
import threading
from typing import Any

import pytest
from celery import Celery

from celery_delayq import ConfigurationError
from celery_delayq.config.catalog import SETTINGS, WEB_SETTINGS
from celery_delayq.config.dashboard import WebConfig
from celery_delayq.config.fields import WEB_PREFIX
from celery_delayq.config.settings import DelayqConfig

from ..helpers import NOWHERE, noop_task

pytestmark = pytest.mark.unit


def test_a_non_redis_broker_url_is_refused_at_start(app_factory):
    app = app_factory(url="amqp://guest@localhost:5672//")
    with pytest.raises(ConfigurationError, match="needs a .*redis.* broker URL"):
        noop_task(app).apply_async(countdown=5)


def test_rediss_without_ssl_settings_is_refused_at_start(app_factory):
    app = app_factory(url="rediss://localhost:6380/0")
    with pytest.raises(ConfigurationError, match="broker_use_ssl"):
        with app.connection_for_write() as connection:
            connection.default_channel  # noqa: B018


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("delayq_move_batch_size", 0, "integer from 1 to 10000"),
        ("delayq_mover_max_sleep", "soon", "number of seconds"),
        ("delayq_move_ahead", 2, "number of seconds from 0 to 1"),
        ("delayq_move_ahead", -0.01, "number of seconds from 0 to 1"),
        ("delayq_move_call_budget", -0.001, "number of seconds from 0 to 1"),
        ("delayq_move_call_budget", True, "number of seconds from 0 to 1"),
        ("delayq_burst_ahead", 61, "number of seconds from 0 to 60"),
        ("delayq_periodic_horizon", 86_401, "number of seconds from 1 to 86400"),
        ("delayq_periodic_horizon", True, "number of seconds from 1 to 86400"),
        ("delayq_worker_mover", "yes", "True or False"),
        ("delayq_key_prefix", "", "non-empty string"),
        ("delayq_batch", 10, "unknown celery-delayq setting 'delayq_batch'"),
        (
            "delayq_store_url",
            "amqp://x//",
            "sentinel:// or (for a Redis Cluster) redis+cluster:// or rediss+cluster://",
        ),
        ("delayq_store_url", "sentinel://localhost:26379", "needs delayq_store_master_name"),
        ("delayq_handover_tries", 0, "integer of at least 1"),
        ("delayq_handover_lease", -1, "number of seconds"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_error(app_factory, setting, value, message):
    app = app_factory(**{setting: value})
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        noop_task(app).apply_async(countdown=5)


def test_two_apps_with_different_settings_need_the_publisher_to_be_current(app_factory):
    first = app_factory(delayq_key_prefix="one")
    app_factory(delayq_key_prefix="two")
    outcome: list[BaseException] = []

    def publish() -> None:
        try:
            noop_task(first).apply_async(countdown=60)
        except ConfigurationError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=publish)
    thread.start()
    thread.join()
    assert "make the publishing app current" in str(outcome[0])


def test_celerys_list_form_of_failover_broker_urls_is_checked_part_by_part(app_factory):
    app = app_factory(url=["redis://:pw@localhost:9/0", "amqp://u:SECRET@h2//"])
    with pytest.raises(ConfigurationError, match="needs a .*redis.* broker URL") as refused:
        noop_task(app).apply_async(countdown=5)
    assert "SECRET" not in str(refused.value)
    assert "amqp://u:**@h2//" in str(refused.value)


def test_the_settings_show_the_store_url_with_its_passwords_masked():
    shown = repr(DelayqConfig(store_url="redis://:one@a:1/0;redis://:two@b:2/0"))
    assert "store_url='redis://:**@a:1/0;redis://:**@b:2/0'" in shown
    assert "metrics_addr='127.0.0.1'" in shown
    assert "store_url=None" in repr(DelayqConfig())


class NamespacedSettings:
    """Settings as Django keeps them: every Celery name in capitals after ``CELERY_``."""

    CELERY_BROKER_URL = NOWHERE
    CELERY_BROKER_TRANSPORT = "celery_delayq.transport:Transport"
    CELERY_DELAYQ_MOVE_AHEAD = 0.05
    CELERY_DELAYQ_KEY_PREFIX = "shop"
    CELERY_DELAYQ_WEB_TOKEN = "a-long-Token-9876"


def namespaced_app(**extra: Any) -> Celery:
    settings = type("Settings", (NamespacedSettings,), extra)
    app = Celery("namespaced", set_as_current=False)
    app.config_from_object(settings, namespace="CELERY")
    return app


def test_celery_delayq_names_in_the_celery_namespace_are_the_delayq_settings():
    app = namespaced_app()
    config = DelayqConfig.from_app(app)
    assert (config.move_ahead, config.key_prefix) == (0.05, "shop")
    assert WebConfig.from_app(app, environ={}).token == "a-long-Token-9876"


def test_a_misspelt_name_in_the_celery_namespace_is_refused():
    with pytest.raises(ConfigurationError, match="unknown celery-delayq setting 'CELERY_DELAYQ_"):
        DelayqConfig.from_app(namespaced_app(CELERY_DELAYQ_MOVE_AHAED=0.05))


def test_every_web_setting_is_read_through_the_registry():
    values = {
        "delayq_web_username": "ops",
        "delayq_web_password": "pw",
        "delayq_web_token": "tok",
        "delayq_web_secret_key": "key",
        "delayq_web_secure_cookies": True,
        "delayq_web_allowed_hosts": ["a.example"],
    }
    assert set(values) == WEB_SETTINGS
    app = Celery("web", set_as_current=False)
    app.conf.update(values)
    read = dataclasses.asdict(WebConfig.from_app(app, environ={}))
    assert {WEB_PREFIX + name: value for name, value in read.items()} == values
    DelayqConfig.from_app(app)  # known names: no error
    assert WebConfig.from_app(app, {"DELAYQ_WEB_TOKEN": "env"}).token == "env"


#: A value each checked setting refuses.
REFUSED = {
    "delayq_key_prefix": " ",
    "delayq_worker_mover": "yes",
    "delayq_reliable_consume": 1,
    "delayq_move_batch_size": 10_001,
    "delayq_move_call_budget": 2,
    "delayq_mover_max_sleep": 0,
    "delayq_move_ahead": -1,
    "delayq_burst_ahead": 61,
    "delayq_periodic_horizon": 0.5,
    "delayq_mover_retry_max": "soon",
    "delayq_metrics_port": 70_000,
    "delayq_inspect_limit": -1,
    "delayq_max_deliveries": -1,
    "delayq_store_url": "amqp://x//",
    "delayq_store_shards": 0,
    "delayq_store_wait_replicas": 17,
    "delayq_store_wait_timeout": -1,
    "delayq_handover_lease": 0,
    "delayq_handover_tries": 0,
    "delayq_handover_backoff": True,
    "delayq_max_message_size": -1,
    "delayq_rate_limits": ["10/s"],
    "delayq_concurrency_limits": "3",
    "delayq_global_rate_limits": "yes",
    "delayq_concurrency_lease": 0,
    "delayq_release_log": -1,
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_registry_says_what_the_check_refuses(app_factory, name):
    """``metadata["valid"]`` (the settings reference shows it) is what the error says."""
    valid = SETTINGS[name].metadata["valid"]
    with pytest.raises(ConfigurationError, match=re.escape(f"{name} must be {valid}, got")):
        DelayqConfig.from_app(app_factory(**{name: REFUSED[name]}))


def test_every_checked_setting_is_tried():
    assert {name for name, field in SETTINGS.items() if "valid" in field.metadata} == set(REFUSED)
