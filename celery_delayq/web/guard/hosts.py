"""Which ``Host`` headers the dashboard answers (against DNS rebinding): a page on
attacker.example whose name is re-pointed at 127.0.0.1 reaches the dashboard with
``Host: attacker.example``, and is refused here.

Allowed: the loopback names, the address it is bound to, and the names a proxy serves it
under (``delayq_web_allowed_hosts``: a list, or a comma-separated string; the
``DELAYQ_WEB_ALLOWED_HOSTS`` environment variable wins). ``*`` allows any host, for an app
that mounts the dashboard and checks the Host header itself. Ports are not compared.

An IP address is always allowed (an address bound to 0.0.0.0 is reached by one): a
rebinding page's Host is the attacker's name, never an address, since the browser's
origin is the name it resolved.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable
from typing import Any

from celery import Celery

from ...config.dashboard import WebConfig

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
#: host, [IPv6] host, then an optional port: nothing else is a Host header.
HOST = re.compile(r"(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<name>[A-Za-z0-9._-]+))(?::[0-9]{1,5})?")


def allowed_hosts_of(app: Celery, environ: Any = os.environ) -> list[str]:
    """The extra host names configured for ``app``'s dashboard."""
    value = WebConfig.from_app(app, environ).allowed_hosts or []
    names = value.split(",") if isinstance(value, str) else list(value)
    return [str(name).strip() for name in names if str(name).strip()]


class HostCheck:
    """Whether a request's Host header names this dashboard."""

    def __init__(self, extra: Iterable[str] = ()) -> None:
        names = {_normal(name) for name in extra}
        self.any = "*" in names
        self.allowed = LOOPBACK | {name for name in names if name}

    def allows(self, header: str | None) -> bool:
        if self.any:
            return True
        found = HOST.fullmatch(header or "")
        if found is None:
            return False
        host = _normal(found.group("v6") or found.group("name"))
        return host in self.allowed or _is_address(host)


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _normal(name: str) -> str:
    """Host names compare without case, a trailing dot or IPv6 brackets."""
    return name.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")
