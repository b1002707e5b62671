"""AMQP 0-9-1 frames of a ``basic.publish``, built in memory so a whole batch goes out
in one socket write.

py-amqp writes each publish with a call of its own, and reads the socket before each
(to notice ``connection.blocked``): two system calls and a few dozen Python calls per
message, most of a hand-over's time. The bytes built here are the ones py-amqp would
write (method frame, content header frame, body frames of at most ``frame_max``), with
the properties and header table encoded as py-amqp encodes them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from struct import Struct
from typing import Any

from amqp import spec
from amqp.exceptions import FrameError, FrameSyntaxError
from amqp.serialization import dumps

FRAME_END = b"\xce"
_FRAME_HEADER = Struct(">BHI")  # type, channel, payload size
_CONTENT_HEADER = Struct(">HHQ")  # class id, weight, body size
_METHOD = Struct(">HH")  # class id, method id
_LENGTH = Struct(">I")
_SHORT_STRING = Struct(">B")
_OCTET = Struct(">B")
_LONG_LONG = Struct(">Q")
_SIGNED_LONG = Struct(">ci")
_SIGNED_LONG_LONG = Struct(">cq")
_DOUBLE = Struct(">cd")
_LONG_STRING = Struct(">cI")
_FLAGS = Struct(">H")

METHOD_FRAME, HEADER_FRAME, BODY_FRAME = 1, 2, 3


def _short_string(value: Any) -> bytes:
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
    if len(raw) > 255:
        raise ValueError(f"shortstr over 255 bytes: {value!r}")
    return _SHORT_STRING.pack(len(raw)) + raw


def _octet(value: Any) -> bytes:
    return _OCTET.pack(value)


def _long_long(value: Any) -> bytes:
    return _LONG_LONG.pack(value)


def _table(value: Mapping[str, Any]) -> bytes:
    return header_table(value)  # defined below, with the field encoders


#: py-amqp's ``Message.PROPERTIES`` in order, each with its flag bit and encoder.
_PROPERTIES: tuple[tuple[str, int, Callable[[Any], bytes]], ...] = tuple(
    (name, 1 << (15 - position), encoder)
    for position, (name, encoder) in enumerate(
        (
            ("content_type", _short_string),
            ("content_encoding", _short_string),
            ("application_headers", _table),
            ("delivery_mode", _octet),
            ("priority", _octet),
            ("correlation_id", _short_string),
            ("reply_to", _short_string),
            ("expiration", _short_string),
            ("message_id", _short_string),
            ("timestamp", _long_long),
            ("type", _short_string),
            ("user_id", _short_string),
            ("app_id", _short_string),
            ("cluster_id", _short_string),
        )
    )
)


class _NotJSON(Exception):
    """A header value of a type JSON does not make (a datetime, a Decimal)."""


def _text(value: str, out: list[bytes]) -> None:
    raw = value.encode("utf-8", "surrogatepass")
    out.append(_LONG_STRING.pack(b"S", len(raw)))
    out.append(raw)


def _integer(value: int, out: list[bytes]) -> None:
    if -2147483647 <= value <= 2147483647:  # py-amqp's bounds, -2**31 itself excluded
        out.append(_SIGNED_LONG.pack(b"I", value))
    else:
        out.append(_SIGNED_LONG_LONG.pack(b"L", value))


def _boolean(value: bool, out: list[bytes]) -> None:
    out.append(b"t\x01" if value else b"t\x00")


def _double(value: float, out: list[bytes]) -> None:
    if not math.isfinite(value):
        raise not_a_rabbitmq_double()
    out.append(_DOUBLE.pack(b"d", value))


def not_a_rabbitmq_double() -> FrameSyntaxError:
    """The error of an infinite or NaN float, which py-amqp encodes as any double but
    RabbitMQ cannot read (no Erlang float is one): it closes the publishing connection
    (541 INTERNAL_ERROR), and a hand-over would fail on it, with its batch, every time."""
    return FrameSyntaxError("Table value NaN or infinity: RabbitMQ cannot read it (541)")


def _finite(table: Mapping[str, Any]) -> None:
    """Raise ``not_a_rabbitmq_double()`` for an infinite or NaN float anywhere in ``table``."""
    stack: list[Any] = [table]
    while stack:
        value = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise not_a_rabbitmq_double()
        if isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)


def _void(value: None, out: list[bytes]) -> None:
    out.append(b"V")


def _nested_table(value: dict[str, Any], out: list[bytes]) -> None:
    out.append(b"F")
    out.append(_fields(value))


def _array(value: list[Any], out: list[bytes]) -> None:
    items: list[bytes] = []
    for item in value:
        _item(item, items)
    data = b"".join(items)
    out.append(b"A")
    out.append(_LENGTH.pack(len(data)))
    out.append(data)


#: py-amqp's ``_write_item`` for the types JSON makes, by exact type.
_ITEM_ENCODERS: dict[type, Callable[[Any, list[bytes]], None]] = {
    str: _text,
    int: _integer,
    bool: _boolean,
    float: _double,
    type(None): _void,
    dict: _nested_table,
    list: _array,
}


def _item(value: Any, out: list[bytes]) -> None:
    encode = _ITEM_ENCODERS.get(type(value))
    if encode is None:
        raise _NotJSON
    encode(value, out)


def _fields(table: Mapping[str, Any]) -> bytes:
    out: list[bytes] = []
    for key, value in table.items():
        out.append(_short_string(key))
        _item(value, out)
    data = b"".join(out)
    return _LENGTH.pack(len(data)) + data


def header_table(table: Mapping[str, Any]) -> bytes:
    """A field table (length first): the JSON types here, any other through py-amqp."""
    try:
        return _fields(table)
    except _NotJSON:
        _finite(table)  # the JSON types' encoders check as they go
        return dumps("F", [table])


#: Each property's place in the flags and list, and its encoder, by name.
_PROPERTY_OF = {name: (bit, encode) for name, bit, encode in _PROPERTIES}


def content_properties(properties: Mapping[str, Any]) -> bytes:
    """The property flags and list of a content header; unknown names and None values
    are left out, as py-amqp leaves them out."""
    present: list[tuple[int, bytes]] = []
    for name, value in properties.items():
        known = _PROPERTY_OF.get(name)
        if known is not None and value is not None:
            present.append((known[0], known[1](value)))
    present.sort(reverse=True)  # the highest flag bit first: py-amqp's order
    flags = 0
    for bit, _ in present:
        flags |= bit
    return _FLAGS.pack(flags) + b"".join(encoded for _, encoded in present)


class PublishFrames:
    """Encodes ``basic.publish`` commands for one channel of one connection."""

    def __init__(self, channel_id: int, frame_max: int) -> None:
        self.channel_id = channel_id
        self.body_chunk = frame_max - 8  # frame header and end octet
        self._methods: dict[tuple[str, str], bytes] = {}

    def publish(
        self, exchange: str, routing_key: str, body: bytes, properties: Mapping[str, Any]
    ) -> bytes:
        """The frames of a mandatory publish of ``body`` with ``properties``. Properties
        and headers go in one frame, unlike the body: ``FrameError`` when they do not fit
        (sent, the broker would close the connection, and the batch with it)."""
        method = self._methods.get((exchange, routing_key))
        if method is None:
            method = self._methods[exchange, routing_key] = self._method(exchange, routing_key)
        header = _CONTENT_HEADER.pack(spec.Basic.CLASS_ID, 0, len(body)) + content_properties(
            properties
        )
        chunk = self.body_chunk
        if len(header) > chunk:  # the broker would close the connection (frame_too_large)
            raise FrameError(
                f"the message's properties and headers take {len(header):,} bytes, over the "
                f"{chunk:,} a frame holds (the broker's frame_max less 8)"
            )
        parts = [method, self._frame(HEADER_FRAME, header)]
        if len(body) <= chunk:
            if body:
                parts.append(self._frame(BODY_FRAME, body))
        else:
            parts.extend(
                self._frame(BODY_FRAME, body[i : i + chunk]) for i in range(0, len(body), chunk)
            )
        return b"".join(parts)

    def _method(self, exchange: str, routing_key: str) -> bytes:
        arguments = dumps("Bssbb", (0, exchange, routing_key, True, False))
        return self._frame(METHOD_FRAME, _METHOD.pack(*spec.Basic.Publish) + arguments)

    def _frame(self, kind: int, payload: bytes) -> bytes:
        return b"".join(
            (_FRAME_HEADER.pack(kind, self.channel_id, len(payload)), payload, FRAME_END)
        )
