"""Reading what vanilla publishers and workers left in Redis: queue list entries and
kombu's ``unacked`` entries, and which queues and exchanges an app knows."""

from __future__ import annotations

from typing import Any

from celery import Celery
from kombu.utils.json import loads

from .report import UnreadableMessage


def app_queue_names(app: Celery) -> list[str]:
    """Every queue the app knows (``app.amqp.queues``) plus its default queue."""
    names = {queue.name for queue in app.amqp.queues.values()}
    names.add(app.conf.task_default_queue)
    return sorted(names)


def app_exchange_types(app: Celery) -> dict[str, str]:
    """Exchange name -> type, from the app's queues (a fresh channel knows none)."""
    return {
        queue.exchange.name: queue.exchange.type
        for queue in app.amqp.queues.values()
        if queue.exchange is not None and queue.exchange.name
    }


def decode_message(raw: bytes) -> dict[str, Any]:
    """The kombu message envelope of a queue list entry."""
    try:
        return checked_message(loads(raw))
    except ValueError as exc:
        raise UnreadableMessage(f"not JSON: {exc}") from exc


def decode_unacked(raw: bytes) -> tuple[dict[str, Any], str, str]:
    """Message, exchange and routing key of an ``unacked`` entry (kombu's ``QoS.append``)."""
    try:
        entry = loads(raw)
    except ValueError as exc:
        raise UnreadableMessage(f"not JSON: {exc}") from exc
    if not (isinstance(entry, list) and len(entry) == 3):
        raise UnreadableMessage("not a kombu unacked entry [message, exchange, routing key]")
    message, exchange, routing_key = entry
    return checked_message(message), str(exchange or ""), str(routing_key or "")


def checked_message(message: Any) -> dict[str, Any]:
    """``message`` if it has the shape of a kombu envelope, so reading it cannot fail."""
    if not isinstance(message, dict):
        raise UnreadableMessage(f"not a kombu message: {type(message).__name__}")
    for part in ("headers", "properties"):
        if not isinstance(message.get(part) or {}, dict):
            raise UnreadableMessage(f"{part} is not an object")
    return message


def mark_redelivered(message: dict[str, Any]) -> None:
    """Flag a message the way kombu's ``_do_restore_message`` does before pushing it back."""
    try:
        message["headers"]["redelivered"] = True
        message["properties"]["delivery_info"]["redelivered"] = True
    except (KeyError, TypeError):
        pass
