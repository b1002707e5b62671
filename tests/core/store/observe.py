"""What the model-based and fuzz tests observe of Redis from the outside.

Only public behaviour is read here: kombu's queue lists (whose names kombu forms), whole
database snapshots (to prove that nothing at all was written), and the store's public
methods. No key name or record encoding of the store itself appears in these helpers;
the due-time key a delivered envelope may start with is public (docs/explanation/design.md, "What
Celery and kombu see of delayed tasks").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import redis

from celery_delayq.core.health.consistency import consistency_findings
from celery_delayq.core.store import DelayedStore


def drain(client: redis.Redis, lists: Iterable[str]) -> dict[str, list[bytes]]:
    """Take every message out of these lists; per list in delivery order (oldest first,
    as a consumer's RPOP/BRPOP sees them). Empty lists are left out of the result."""
    names = sorted(set(lists))
    with client.pipeline(transaction=True) as pipe:
        for name in names:
            pipe.lrange(name, 0, -1)
            pipe.delete(name)
        replies = pipe.execute()
    return {name: list(reversed(replies[2 * i])) for i, name in enumerate(names) if replies[2 * i]}


def snapshot(client: redis.Redis) -> dict[bytes, bytes | None]:
    """Every key of the database with its serialized value (``DUMP``): two equal snapshots
    mean nothing was written in between."""
    return {key: client.dump(key) for key in sorted(client.scan_iter(count=1000))}


def inconsistencies(store: DelayedStore) -> list[str]:
    """What ``celery delayq doctor`` would report about the store; [] when consistent."""
    return [f"{f.check}: {f.message}" for f in consistency_findings(store) if f.level != "ok"]


def payload_of(message: object) -> bytes:
    """The payload bytes of a message listed by ``DelayedStore.pending`` or ``find``."""
    payload = getattr(message, "payload", None)
    if payload is None:
        payload = message.record.payload  # type: ignore[attr-defined]
    return bytes(payload)


def due_ms_of(message: object) -> int:
    """The due time, in ms, of a message listed by ``pending`` or ``find``."""
    return round(message.due * 1000)  # type: ignore[attr-defined]


#: The due-time key the store may put first in an envelope it delivers.
_DUE_KEY = re.compile(rb'\{"delayq":(\d+),')


def as_scheduled(delivered: bytes) -> tuple[bytes, int | None]:
    """A delivered message as it was scheduled, and the due time (ms) the store put first
    in it, if it did (None: it was delivered exactly as stored)."""
    found = _DUE_KEY.match(delivered)
    if not found:
        return delivered, None
    return b"{" + delivered[found.end() :], int(found.group(1))
