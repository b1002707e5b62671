"""What celery-delayq reads from (and, for reschedule, writes to) a kombu message envelope."""

from __future__ import annotations

import math
from datetime import datetime, tzinfo
from typing import Any

from celery.utils.time import maybe_iso8601, maybe_make_aware
from kombu.utils.json import dumps, loads

from .errors import InvalidETA


def eta_of(message: dict[str, Any]) -> Any:
    """The raw ``eta`` header of a Celery (protocol 2) message, or None."""
    headers = message.get("headers")
    return headers.get("eta") if isinstance(headers, dict) else None


def eta_timestamp(eta: Any, timezone: tzinfo | None) -> float:
    """Read an ``eta`` header as the worker would, as epoch seconds.

    Uses the same Celery helpers as ``celery.worker.request.Request``, so a naive ETA
    means what it means to a vanilla worker under ``timezone`` / ``enable_utc``.
    """
    if not isinstance(eta, (str, datetime)):
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


def due_ms(seconds: float) -> int:
    """Due time in whole milliseconds, rounded up so nothing is delivered before its ETA."""
    return math.ceil(seconds * 1000)


def with_eta(payload: bytes, eta: datetime) -> bytes:
    """The same kombu message with its ``eta`` header replaced (used by reschedule)."""
    message = loads(payload)
    message["headers"]["eta"] = eta.isoformat()
    return dumps(message).encode()
