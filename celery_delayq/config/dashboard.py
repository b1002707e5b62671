"""The web dashboard's settings (``delayq_web_*``), apart from the core's so that a
process that only publishes never builds them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Celery

from .fields import WEB_PREFIX, setting


@dataclass(frozen=True)
class WebConfig:
    """The web dashboard's settings; the field name plus ``delayq_web_`` is the Celery
    setting, and an environment variable of that name in capitals wins over it."""

    username: str | None = setting(
        None,
        "User name of the dashboard's HTTP basic auth, set with ``delayq_web_password``.",
        env="DELAYQ_WEB_USERNAME",
    )
    password: str | None = setting(
        None,
        "Password of the dashboard's HTTP basic auth, set with ``delayq_web_username``. "
        "Served beyond loopback it needs at least 16 characters, 8 of them different.",
        env="DELAYQ_WEB_PASSWORD",
    )
    token: str | None = setting(
        None,
        "A token for the dashboard, sent as ``Authorization: Bearer <token>`` or typed once "
        "into its login page (the session then keeps only an HMAC of it). Served beyond "
        "loopback it needs at least 16 characters, 8 of them different.",
        env="DELAYQ_WEB_TOKEN",
    )
    secret_key: str | None = setting(
        None,
        "Key that signs the dashboard's session cookie (CSRF tokens, a token login). "
        "None: a random key per process, so a restart ends every session.",
        env="DELAYQ_WEB_SECRET_KEY",
    )
    secure_cookies: bool = setting(
        False,
        "Send the session cookie as ``Secure`` even when the request came over plain HTTP: "
        "for a proxy that ends TLS in front of the dashboard (over HTTPS it always is).",
    )
    allowed_hosts: Sequence[str] = setting(
        (),
        "Host names the dashboard answers besides loopback and its own address (against "
        "DNS rebinding): a list, or a comma-separated string. ``*`` allows any host, for an "
        "app that mounts the dashboard and checks the Host header itself.",
        env="DELAYQ_WEB_ALLOWED_HOSTS",
    )

    @classmethod
    def from_app(cls, app: Celery, environ: Mapping[str, str] | None = None) -> WebConfig:
        """The ``delayq_web_*`` settings of ``app`` (plain or namespaced), each overridden
        by its environment variable in ``environ`` (default: ``os.environ``)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            env = field.metadata.get("env")
            value = (environ.get(env) if env else None) or app.conf.get(WEB_PREFIX + field.name)
            if value is not None:
                values[field.name] = value
        return cls(**values)
