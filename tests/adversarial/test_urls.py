"""Multi-node URLs (issue 25, findings 2, 5 and the exporter's bind in 11).

- Celery's ``;``-separated failover forms (Redis, Sentinel, AMQP) and the README's cluster
  form ``redis+cluster://a:7000,b:7000/0`` start every process: worker, beat, mover,
  status, doctor and the dashboard, against real servers.
- No password of any URL part appears in anything a user reads: every command's output,
  the start-up logs of worker, beat and mover, and every dashboard page.
- The metrics exporter listens on this host only unless told otherwise.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from hypothesis import given
from hypothesis import strategies as st

from celery_delayq.celery.errors import ConfigurationError
from celery_delayq.celery.settings import DelayqConfig
from celery_delayq.cli import delayq
from celery_delayq.core.urls import sanitize_url
from celery_delayq.testing import RedisServer, free_port, redis_server_binary, wait_until

from ..helpers import NOWHERE, REPO_ROOT, celery_process, invoke, remember, runs, worker_app_env

CLUSTER_FORM = "redis+cluster://a:7000,b:7000/0"
SENTINELS = "sentinel://:s1@h1:26379;sentinel://:s2@h2:26379/0"
AMQP_FAILOVER = "amqp://u:p1@h1//;amqp://u:p2@h2//"


def closed_port() -> int:
    """A local port nothing listens on: the unreachable second host of a failover URL."""
    port = free_port()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    return port


# -- the helper every URL goes through ----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (CLUSTER_FORM, CLUSTER_FORM),
        ("redis+cluster://u:pw@a:7000,b:7000/0", "redis+cluster://u:**@a:7000,b:7000/0"),
        (
            "sentinel://:s1@h1:26379;sentinel://:s2@h2:26379/0",
            "sentinel://:**@h1:26379;sentinel://:**@h2:26379/0",
        ),  # noqa: E501
        (AMQP_FAILOVER, "amqp://u:**@h1//;amqp://u:**@h2//"),
        ("redis://:pw@h:6379/0", "redis://:**@h:6379/0"),
        ("redis://h/0?db=1&password=pw", "redis://h/0?db=1&password=**"),
        (
            "sentinel://h:26379/0?sentinel_kwargs=%7B%22password%22%3A%22pw%22%7D",
            "sentinel://h:26379/0?sentinel_kwargs=**",
        ),  # noqa: E501
        ("unix://:pw@/run/redis.sock?db=0", "unix://:**@/run/redis.sock?db=0"),
        ("redis://:pw@[::1]:6379/0", "redis://:**@[::1]:6379/0"),
        ("redis+cluster://u:p1@a:7000,u:p2@b:7000/0", "redis+cluster://**@a:7000,**@b:7000/0"),
        ("redis://user@h/0", "redis://user@h/0"),
        (["amqp://u:p1@h1//", "amqp://u:p2@h2//"], "amqp://u:**@h1//;amqp://u:**@h2//"),
        ("redis://:pa/ss@h/0", "redis://**"),  # unescaped "/" in a password: all masked
        ("redis://h/0?password=a@b", "redis://**"),
        ("amqp://u:p;q@h//", "amqp://**;**@h//"),  # unescaped ";": both halves masked
        ("memory://", "memory://"),
    ],
)
def test_every_part_of_a_url_is_shown_with_its_passwords_masked(url: Any, shown: str) -> None:
    assert sanitize_url(url) == shown


SECRET = st.text(st.characters(codec="utf-8", exclude_characters="\n"), min_size=1).map(
    lambda text: "PW" + text
)
FORMS = st.sampled_from(
    [
        "redis://:{p}@h:6379/0",
        "redis://user:{p}@h:6379/0;redis://user:{p}@g:6379/0",
        "redis+cluster://u:{p}@a:7000,b:7000/0",
        "redis+cluster://u:{p}@a:7000,v:{p}@b:7000/0",
        "sentinel://:{p}@h1:26379;sentinel://:{p}@h2:26379/0",
        "amqp://u:{p}@h1//;amqp://u:{p}@h2//",
        "redis://h:6379/0?password={p}",
        "unix://:{p}@/run/redis.sock",
    ]
)


@given(FORMS, SECRET)
def test_no_password_survives_sanitizing_whatever_its_characters(form: str, secret: str) -> None:
    assert secret not in sanitize_url(form.format(p=secret))


@given(st.text())
def test_sanitizing_never_raises(text: str) -> None:
    assert isinstance(sanitize_url(text), str)


# -- settings: the multi-node forms validate -------------------------------------------------


@pytest.mark.parametrize(
    ("store_url", "master"),
    [
        (CLUSTER_FORM, None),
        ("rediss+cluster://u:pw@a:7000,b:7000", None),
        ("sentinel://h1:26379;sentinel://h2:26379/0", "mymaster"),
        ("sentinel://:pw@h1:26379;sentinel://:pw@h2:26379", "mymaster"),
    ],
)
def test_multi_node_store_urls_are_valid_settings(store_url: str, master: str | None) -> None:
    config = DelayqConfig(store_url=store_url, store_master_name=master)
    assert config.store_url == store_url


def test_a_refused_multi_node_url_is_named_without_its_passwords() -> None:
    with pytest.raises(ConfigurationError) as refused:
        DelayqConfig(store_url="redis+cluster://u:SECRET-a@a:7000,b:7000/3")
    assert "database 0 only" in str(refused.value)
    assert "SECRET" not in str(refused.value)
    with pytest.raises(ConfigurationError) as refused:
        DelayqConfig(store_url="mongodb://u:SECRET-b@a:1,b:2;mongodb://u:SECRET-c@c:3")
    assert "SECRET" not in str(refused.value)


def test_the_metrics_exporter_listens_on_this_host_only_unless_told_otherwise(
    app_factory: Any,
) -> None:
    pytest.importorskip("prometheus_client")
    from celery_delayq.celery.metrics import start_configured_exporter, start_exporter

    port = free_port()
    server = start_configured_exporter(app_factory(delayq_metrics_port=port))
    assert server is not None
    try:
        assert server.server_address[:2] == ("127.0.0.1", port)
    finally:
        server.shutdown()
    server, _ = start_exporter(app_factory(), free_port())
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.shutdown()
    server = start_configured_exporter(
        app_factory(delayq_metrics_port=free_port(), delayq_metrics_addr="0.0.0.0")
    )
    assert server is not None
    try:
        assert server.server_address[0] == "0.0.0.0"
    finally:
        server.shutdown()


def test_the_exporter_command_follows_the_setting_and_its_option() -> None:
    settings = {"delayq_metrics_addr": "127.0.0.2"}
    for args, addr in (([], "127.0.0.2"), (["--addr", "127.0.0.1"], "127.0.0.1")):
        port = free_port()
        with celery_process(
            "delayq",
            NOWHERE,
            settings,
            "exporter",
            "--port",
            str(port),
            *args,
            ready=f"serving http://{addr}:{port}/metrics",
            log_level=None,
        ):
            pass
    port = free_port()
    with celery_process(
        "delayq",
        NOWHERE,
        None,
        "exporter",
        "--port",
        str(port),
        ready=f"serving http://127.0.0.1:{port}/metrics",
        log_level=None,
    ):
        pass
