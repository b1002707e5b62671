"""What celery-delayq reads from (and, for reschedule, writes to) a kombu message envelope,
and what a worker needs of a message its broker delivered to move it to the dead letters
instead of handing it to Celery (worker/poison.py): each broker's channel tells where the
message came from (``Delivered``) and how often it has been delivered."""

from __future__ import annotations

import base64
import math
import struct
import uuid
from datetime import datetime, tzinfo
from typing import Any, NamedTuple, SupportsIndex, SupportsInt

from celery.utils.time import maybe_iso8601, maybe_make_aware
from kombu import serialization
from kombu.message import Message
from kombu.utils.json import dumps, loads

from ...config.errors import InvalidETA
from ...core.layout.record import Record, message_key
from ...core.store import DelayedStore

#: The only serializer a message body is decoded with for display: reading a task must
#: never run code (pickle would), whatever the app accepts for its workers.
DISPLAY_ACCEPT = ["application/json"]
#: How many bytes of a body that is not decoded are shown.
PREVIEW_BYTES = 64

#: The header every delayed message carries when a mover hands it to another broker: the
#: same for each publish of it (core/handover/publishing.py ``Outgoing.stable_id``).
STABLE_ID_HEADER = "x-delayq-id"
#: The one header of a message whose properties its transport could not read, saying why
#: (brokers/amqp/inbound.py): the worker's poison guard moves it to the dead letters.
UNREADABLE_HEADER = "x-delayq-unreadable"


def eta_of(message: dict[str, Any]) -> Any:
    """The raw ``eta`` header of a Celery (protocol 2) message, or None."""
    headers = message.get("headers")
    return headers.get("eta") if isinstance(headers, dict) else None


def eta_timestamp(eta: Any, timezone: tzinfo | None) -> float:
    """Read an ``eta`` header as the worker would, as epoch seconds.

    Uses the same Celery helpers as ``celery.worker.request.Request``, so a naive ETA
    means what it means to a vanilla worker under ``timezone`` / ``enable_utc``.
    """
    if isinstance(eta, str):
        quick = _celerys_own_form(eta)
        if quick is not None:
            return quick
    elif not isinstance(eta, datetime):
        raise InvalidETA(
            f"eta header must be an ISO 8601 string, got {type(eta).__name__}: {eta!r}"
        )
    try:
        moment = maybe_make_aware(maybe_iso8601(eta), timezone)
        seconds = moment.timestamp()
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise InvalidETA(f"invalid eta {eta!r}: {exc}") from exc
    if not math.isfinite(seconds):
        raise InvalidETA(f"invalid eta {eta!r}: not a finite time")
    return seconds


def _celerys_own_form(eta: str) -> float | None:
    """The epoch seconds of an ``eta`` in the form Celery writes (an aware datetime's
    ``isoformat()``, a whole-minute offset), read by the standard library's C parser;
    None for any other form, which Celery's own helpers read. Such a string means the
    same to both parsers, and reading it here is several times faster (every delayed
    publish reads one)."""
    if len(eta) < 6 or eta[-6] not in "+-" or eta[-3] != ":":
        return None
    try:
        moment = datetime.fromisoformat(eta)
        return moment.timestamp() if moment.isoformat() == eta else None
    except (ValueError, OverflowError):
        return None


def eta_span(payload: bytes, eta: Any) -> tuple[int, int] | None:
    """Where the encoded kombu envelope ``payload`` spells its ``eta`` header's value:
    (byte offset, length), or None where it cannot be found.

    kombu's JSON writes ``"eta": "<value>"``, and headers come before properties; a
    quote inside any string value is escaped, so the first match is the header itself.
    """
    if not isinstance(eta, str):
        return None
    value = eta.encode()
    found = payload.find(b'"eta": "' + value + b'"')
    if found < 0:
        return None
    return found + len(b'"eta": "'), len(value)


def due_ms(seconds: float, no_eta: bool = False) -> int:
    """Due time in whole milliseconds, rounded up so nothing is delivered before its ETA;
    ``no_eta``: a message sent without an ETA (a limited task's), due now at ``seconds``,
    rounded down so that the store's clock finds it due as it is written."""
    return int(seconds * 1000) if no_eta else math.ceil(seconds * 1000)


def with_eta(payload: bytes, eta: datetime) -> bytes:
    """The same kombu message with its ``eta`` header replaced (used by reschedule)."""
    return with_header(payload, "eta", eta.isoformat())


#: What decoding a crafted stored message raises (its JSON, its fields, their types).
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, RecursionError, struct.error)


def with_header(payload: bytes, name: str, value: Any) -> bytes:
    """The same kombu message with one header set."""
    message = loads(payload)
    message.setdefault("headers", {})[name] = value
    return dumps(message).encode()


def describe(payload: bytes) -> dict[str, Any]:
    """What an operator wants to see of a stored Celery message (for ``list``/``show``).

    The CLI and the web pages call this; the mover never decodes payloads. A body that is
    not JSON (pickle, say) is described, never deserialized (``_body_reprs``).
    """
    try:
        message = loads(payload)
        headers, properties = _dict(message.get("headers")), _dict(message.get("properties"))
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        return {"task": None, "id": None, "error": f"unreadable message: {exc}"}
    described = {
        "task": headers.get("task"),
        "id": headers.get("id"),
        "eta": headers.get("eta"),
        "retries": headers.get("retries", 0),
        "priority": properties.get("priority"),
        "args": headers.get("argsrepr"),
        "kwargs": headers.get("kwargsrepr"),
        "message_id": properties.get("delivery_tag"),
    }
    if described["args"] is None:
        described["args"], described["kwargs"] = _body_reprs(message)
    return described


def message_headers(payload: bytes) -> dict[str, Any]:
    """Every header of a stored Celery message ({} when it cannot be read)."""
    try:
        headers = loads(payload).get("headers")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return {}
    return headers if isinstance(headers, dict) else {}


def _dict(value: Any) -> dict[str, Any]:
    """A part of a hostile envelope that should be an object: {} when it is not."""
    return value if isinstance(value, dict) else {}


def _body_reprs(message: dict[str, Any]) -> tuple[str, str]:
    """The args and kwargs of a message body as reprs: JSON only (DISPLAY_ACCEPT); any
    other body is described (content type, size, its first bytes), never deserialized."""
    try:
        body = message["body"]
        if (message.get("properties") or {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
    except Exception as exc:  # noqa: BLE001 - a display helper must not fail
        return f"<body not readable: {exc}>", ""
    content_type = message.get("content-type")
    try:
        args, kwargs, _ = serialization.loads(
            body,
            content_type,
            message.get("content-encoding", "utf-8"),
            accept=DISPLAY_ACCEPT,
        )
        return repr(tuple(args)), repr(kwargs)
    except Exception:  # noqa: BLE001 - a display helper must not fail
        return describe_body(body, content_type), ""


def describe_body(body: Any, content_type: Any) -> str:
    """A body shown as bytes: its content type, size and first bytes (escaped)."""
    raw = body if isinstance(body, bytes) else str(body).encode("utf-8", "surrogatepass")
    more = "…" if len(raw) > PREVIEW_BYTES else ""
    return (
        f"<not decoded for display: {content_type or 'no content type'}, "
        f"{len(raw):,} bytes: {raw[:PREVIEW_BYTES]!r}{more}>"
    )


def kombu_message(payload: bytes, channel: Any) -> Message:
    """The kombu ``Message`` of a stored envelope, whichever transport stored it (for
    code that reads messages as a worker receives them, such as ``inspect scheduled``)."""
    stored = loads(payload)
    properties = stored.get("properties") or {}
    body = stored.get("body")
    if properties.get("body_encoding") == "base64":
        body = base64.b64decode(body)
    return Message(
        body=body,
        channel=channel,
        delivery_tag=properties.get("delivery_tag"),
        content_type=stored.get("content-type"),
        content_encoding=stored.get("content-encoding"),
        headers=stored.get("headers") or {},
        properties=properties,
        delivery_info=properties.get("delivery_info") or {},
        postencode="utf-8",
    )


class Delivered(NamedTuple):
    """A delivered message, as its dead letter keeps it."""

    queue: str  # the queue it was taken from: its dead letters are filed under it
    destination: str  # where ``celery delayq dead resend`` sends it: back to that queue
    payload: bytes  # its kombu envelope, as the store keeps messages


def file_dead_letter(store: DelayedStore, delivered: Delivered, reason: str) -> None:
    """Keep ``delivered`` as a dead letter of its queue, with the reason. Its key is new
    (not its task id, which a crafted message may share with another dead letter)."""
    key = message_key(None, f"unreadable:{uuid.uuid4().hex}")
    record = Record(0, delivered.destination, delivered.payload)
    store.add_dead_letter(delivered.queue, key, record, reason)


def count_of(value: object) -> int:
    """A delivery count read from a header or attribute; 0 (unknown) when it is not a
    whole number (a hostile value counts as nothing)."""
    if isinstance(value, bool) or not isinstance(
        value, (int, str, bytes, bytearray, SupportsInt, SupportsIndex)
    ):
        return 0  # int() would refuse it too (a list, None, ...)
    try:
        count = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(count, 0)
