"""Find the Celery app whose settings a transport channel must use.

kombu gives a channel no reference to the Celery app that opened its connection, and
``current_app`` is Celery's empty fallback app in any thread that did not create the
app (a thread-pool web server, for one). So: the thread's current app if it selects
this transport, else the one app in the process that does.
"""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery._state import _get_active_apps, get_current_app
from kombu.transport import get_transport_cls

from .config import DelayqConfig
from .errors import ConfigurationError


def uses_delayq(app: Celery) -> bool:
    """Whether ``app``'s ``broker_transport`` is a celery-delayq transport."""
    from .transport import DelayedPublishMixin

    transport = app.conf.broker_transport
    if not transport:
        return False
    try:
        cls: Any = get_transport_cls(transport) if isinstance(transport, str) else transport
    except (ImportError, KeyError, ValueError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(getattr(cls, "Channel", object),
                                                DelayedPublishMixin)  # fmt: skip


def delayq_app() -> Celery:
    """The app a new channel takes its ``delayq_*`` settings from."""
    current = get_current_app()
    if uses_delayq(current):
        return current
    candidates = [app for app in list(_get_active_apps()) if uses_delayq(app)]
    if not candidates:
        return current  # kombu used directly, with the transport named in code
    settings = {DelayqConfig.from_app(app) for app in candidates}
    if len(settings) > 1:
        raise ConfigurationError(
            "several Celery apps in this process use celery-delayq with different delayq_* "
            "settings; make the publishing app current with app.set_current() in this "
            "thread, or app.set_default()"
        )
    return candidates[0]
