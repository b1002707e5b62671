"""An AMQP message as the delayed store keeps it, and back.

The store keeps every delayed message as a kombu envelope (the JSON that kombu's Redis
transport pushes: body, headers, properties), so ``list``, ``show``, ``reschedule`` and
``inspect scheduled`` read AMQP messages exactly as they read Redis ones. The exchange
and routing key a producer published to are the record's destination.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import amqp
from kombu.utils.json import dumps, object_hook

from ..common.message import STABLE_ID_HEADER

#: Where a due message keeps its ETA when it reaches a RabbitMQ worker (due_content).
ETA_HEADER = "x-delayq-eta"

#: Separates exchange and routing key in a destination (no exchange name holds it).
DESTINATION_SEPARATOR = "\x1f"

#: kombu's JSON decoding (its typed values, a datetime say, come back as such), made
#: once: ``kombu.utils.json.loads`` makes a decoder per call.
_decode = json.JSONDecoder(object_hook=object_hook).decode


def destination(exchange: str, routing_key: str) -> str:
    return f"{exchange}{DESTINATION_SEPARATOR}{routing_key}"


def exchange_and_routing_key(destination: str) -> tuple[str, str]:
    exchange, _, routing_key = destination.partition(DESTINATION_SEPARATOR)
    return exchange, routing_key


def envelope(message: amqp.Message) -> bytes:
    """The kombu envelope of a py-amqp message: body (base64), headers and properties."""
    properties = dict(message.properties)
    headers = properties.pop("application_headers", None) or {}
    content_type = properties.pop("content_type", None)
    content_encoding = properties.pop("content_encoding", None)
    body = message.body if isinstance(message.body, bytes) else str(message.body).encode()
    return dumps(
        {
            "body": base64.b64encode(body).decode("ascii"),
            "content-encoding": content_encoding,
            "content-type": content_type,
            "headers": headers,
            "properties": {**properties, "body_encoding": "base64"},
        }
    ).encode()


def due_content(payload: bytes, stable_id: str) -> tuple[bytes, dict[str, Any]]:
    """The body and py-amqp properties of a due stored envelope, with the stable id
    header added and its ``eta`` header renamed ``x-delayq-eta``.

    A Celery worker treats a task with an ``eta`` header as an ETA task even when the
    ETA has passed: it goes through the worker's timer and raises and lowers the
    channel's prefetch count, two ``basic.qos`` round trips per task, so on RabbitMQ a
    worker runs such tasks a few per second (measured: 4/s at prefetch 1, 25/s at 4,
    against 574/s without the header). The message is due when a mover publishes it
    (by the Redis clock), so it goes as an ordinary task; the ETA stays readable as
    ``task.request.get("x-delayq-eta")``.
    """
    stored: dict[str, Any] = _decode(payload.decode("utf-8"))
    properties = stored.get("properties") or {}
    headers = {**(stored.get("headers") or {}), STABLE_ID_HEADER: stable_id}
    if headers.get("eta") is not None:
        headers[ETA_HEADER] = headers.pop("eta")
    # The properties table is the stored one; only the names py-amqp knows are encoded
    # (frames.py), so its ``body_encoding`` needs no removing.
    return binascii.a2b_base64(stored["body"]), {  # base64.b64decode, minus its checks
        **properties,
        "content_type": stored.get("content-type"),
        "content_encoding": stored.get("content-encoding"),
        "application_headers": headers,
    }
