"""Who may use the web pages: HTTP basic auth or a token, from the Celery app's settings
or the environment, and the rule that only a loopback address may go without.

Settings (environment variables of the same name in capitals win over them):
``delayq_web_username`` and ``delayq_web_password`` for basic auth, ``delayq_web_token``
for a token (sent as ``Authorization: Bearer <token>``, or typed once into the login
page). A login keeps only a digest of the token in the signed session cookie (an HMAC
under the secret key: the cookie is signed, not encrypted), never the token itself.

Serving beyond loopback needs authentication, and secrets of at least
MIN_SECRET_LENGTH characters with MIN_DISTINCT different ones: the login is rate
limited (throttle.py), but a short secret falls to guessing anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from dataclasses import dataclass
from typing import Any

from celery import Celery

from ...config.dashboard import WebConfig

MIN_SECRET_LENGTH = 16
MIN_DISTINCT = 8


class AddressRefused(Exception):
    """Listening beyond this machine without authentication configured."""


@dataclass(frozen=True)
class Access:
    username: str | None = None
    password: str | None = None
    token: str | None = None

    @property
    def required(self) -> bool:
        return bool((self.username and self.password) or self.token)

    def basic_ok(self, username: str | None, password: str | None) -> bool:
        if not (self.username and self.password and username is not None and password):
            return False
        return _same(username, self.username) & _same(password, self.password)

    def token_ok(self, token: str | None) -> bool:
        return bool(self.token and token) and _same(token or "", self.token or "")

    def login_digest(self, key: str | bytes) -> str:
        """What a session keeps of a token login: an HMAC of the token under ``key``
        (the secret key), so the cookie never shows the token, and a new token ends it."""
        secret = key.encode() if isinstance(key, str) else key
        return hmac.new(secret, (self.token or "").encode(), hashlib.sha256).hexdigest()

    def digest_ok(self, digest: object, key: str | bytes) -> bool:
        return bool(self.token and isinstance(digest, str)) and _same(
            str(digest), self.login_digest(key)
        )

    def weak_secrets(self) -> list[str]:
        """The settings whose secret is too easy to guess to serve beyond loopback."""
        secrets = (("delayq_web_password", self.password), ("delayq_web_token", self.token))
        return [name for name, value in secrets if value and _weak(value)]


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison: how long it takes says nothing about the secret."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _weak(secret: str) -> bool:
    return len(secret) < MIN_SECRET_LENGTH or len(set(secret)) < MIN_DISTINCT


def access_of(app: Celery, environ: Any = os.environ) -> Access:
    """The credentials configured for ``app``'s web pages."""
    config = WebConfig.from_app(app, environ)
    values = (config.username, config.password, config.token)
    username, password, token = (str(v) if v else None for v in values)
    if bool(username) != bool(password):
        raise ValueError("set both delayq_web_username and delayq_web_password, or neither")
    return Access(username, password, token)


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_address(address: str, access: Access) -> None:
    """Refuse to serve beyond this machine unless authentication is configured."""
    if not is_loopback(address) and not access.required:
        raise AddressRefused(
            f"refusing to listen on {address} without authentication: set "
            "delayq_web_username and delayq_web_password (or DELAYQ_WEB_USERNAME and "
            "DELAYQ_WEB_PASSWORD), or delayq_web_token (DELAYQ_WEB_TOKEN)"
        )
    weak = [] if is_loopback(address) else access.weak_secrets()
    if weak:
        raise AddressRefused(
            f"refusing to listen on {address} with a weak {' and '.join(weak)}: beyond this "
            f"machine use at least {MIN_SECRET_LENGTH} characters, {MIN_DISTINCT} of them "
            "different (python -c 'import secrets; print(secrets.token_urlsafe(24))')"
        )
