"""``doctor``'s checks of a broker that is not the store's Redis (``delayq_store_url``):
can movers reach it, and do producers publish with confirms."""

from __future__ import annotations

from celery import Celery

from ..core.health.health_checks import FAIL, OK, WARN, Finding
from ..core.urls import sanitize_url

CONFIRMS_FIX = "set broker_transport_options = {'confirm_publish': True}"


def broker_findings(app: Celery) -> list[Finding]:
    return [_reachable(app), _confirms(app)]


def _reachable(app: Celery) -> Finding:
    url = sanitize_url(app.conf.broker_write_url or app.conf.broker_url or "")
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1)
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return Finding(
            "broker", FAIL, f"{url} unreachable: {exc}", "start the broker or fix broker_url"
        )
    return Finding("broker", OK, f"{url} reachable")


def _confirms(app: Celery) -> Finding:
    """Movers always publish with confirms and ``mandatory``; producers do only when
    asked, and without it RabbitMQ can drop a refused message silently."""
    options = app.conf.broker_transport_options or {}
    if options.get("confirm_publish"):
        return Finding("publisher confirms", OK, "movers and producers publish with confirms")
    return Finding(
        "publisher confirms",
        WARN,
        "movers publish with confirms, producers without: a message the broker refuses "
        "(resource limits, max_message_size) is lost without an error",
        CONFIRMS_FIX,
    )
