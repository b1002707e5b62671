"""``app.control.revoke`` reaches delayed tasks: a revoke cancels them in the store.

Celery's revoke is a broadcast that marks the ids in the memory of the workers alive at
that moment; a delayed task waits in the store, so it would run once those workers are
restarted, or on a worker that was not running. The broadcast is published through
celery-delayq's channel, so the channel reads it on the way out (``revoked_task_ids``)
and cancels the ids in the store before the broadcast goes on unchanged: this works with
no worker running, and a task that has already moved keeps Celery's own behaviour.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from kombu.serialization import loads


def revoked_task_ids(
    body: bytes, content_type: str | None, content_encoding: str | None
) -> list[str]:
    """The task ids of a remote-control ``revoke`` command (one id or a list); [] for any
    other command, or a body that is not one. JSON only (Celery's ``control_serializer``
    default): nothing else is decoded here, pickle least of all."""
    try:
        command = loads(body, content_type, content_encoding, accept=["application/json"])
    except Exception:  # noqa: BLE001 - not a command this module reads: leave it alone
        return []
    if not isinstance(command, Mapping) or command.get("method") != "revoke":
        return []
    ids = (command.get("arguments") or {}).get("task_id")
    if isinstance(ids, str):
        return [ids]
    return [str(one) for one in ids or ()]


def kombu_message_body(message: Mapping[str, Any]) -> bytes:
    """The body of a message as kombu's virtual transports carry it."""
    body = message.get("body", b"")
    if message.get("properties", {}).get("body_encoding") == "base64":
        return base64.b64decode(body)
    return body if isinstance(body, bytes) else str(body).encode("utf-8")
