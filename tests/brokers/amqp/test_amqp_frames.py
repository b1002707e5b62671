"""The publish frames the AMQP hand-over writes in one go are the bytes py-amqp's own
publish writes: same method, content header (properties, header table) and body frames."""

from __future__ import annotations

import types
from datetime import datetime
from decimal import Decimal
from typing import Any

import amqp
import pytest
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps

from celery_delayq.brokers.amqp.frames import PublishFrames

pytestmark = pytest.mark.unit

FRAME_MAX = 4096

EVERY_PROPERTY = {
    "content_type": "application/json",
    "content_encoding": "utf-8",
    "delivery_mode": 2,
    "priority": 3,
    "correlation_id": "c",
    "reply_to": "r",
    "expiration": "100",
    "message_id": "m",
    "timestamp": 12345,
    "type": "t",
    "user_id": "guest",
    "app_id": "a",
    "cluster_id": "k",
}
JSON_HEADERS = {
    "text": "é",
    "small": -2147483647,
    "large": -2147483648,  # py-amqp writes it as a long long
    "huge": 2**40,
    "none": None,
    "yes": True,
    "no": False,
    "float": 1.5,
    "list": [1, "x", [None]],
    "table": {"nested": {"deep": 1}},
}


def pyamqp_frames(exchange: str, routing_key: str, body: bytes, properties: Any) -> bytes:
    written: list[bytes] = []
    connection = types.SimpleNamespace(frame_max=FRAME_MAX, bytes_sent=0)
    transport = types.SimpleNamespace(write=lambda data: written.append(bytes(data)))
    write = frame_writer(connection, transport)
    arguments = dumps("Bssbb", (0, exchange, routing_key, True, False))
    write(1, 7, spec.Basic.Publish, arguments, amqp.Message(body, **properties))
    return b"".join(written)


@pytest.mark.parametrize(
    ("body", "properties"),
    [
        (b"x" * 300, {**EVERY_PROPERTY, "application_headers": JSON_HEADERS}),
        (b"", {"application_headers": {"when": datetime(2030, 1, 1), "cost": Decimal("1.5")}}),
        (b"y" * (3 * FRAME_MAX), {"content_type": "text/plain", "body_encoding": "base64"}),
        (b"z", {"priority": None}),
    ],
    ids=["every-property", "not-json-headers", "body-over-frame-max", "bare"],
)
def test_the_frames_are_py_amqps_own(body: bytes, properties: dict[str, Any]) -> None:
    frames = PublishFrames(7, FRAME_MAX)
    assert frames.publish("ex", "rk", body, properties) == pyamqp_frames(
        "ex", "rk", body, properties
    )
