"""The movers' heartbeats: which movers run, where, and when each was last seen.

Every mover writes a JSON heartbeat into one hash at least every few seconds; ``status``,
``doctor`` and the metrics read it to say whether any mover is alive.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from .redis_replies import hash_reply


def is_alive(beat: dict[str, Any], now: float, alive_within: float) -> bool:
    """Whether a heartbeat (``last_seen`` in Redis-clock seconds) is recent enough."""
    return now - float(beat.get("last_seen", 0)) <= alive_within


class MoverRegistry:
    """The heartbeat hash of one store (``P:movers``)."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    def beat(self, mover_id: str, info: dict[str, Any]) -> None:
        """Record that a mover is alive."""
        self.client.hset(self.key, mover_id, json.dumps(info))

    def forget(self, mover_id: str) -> None:
        self.client.hdel(self.key, mover_id)

    def all(self) -> list[dict[str, Any]]:
        """Every heartbeat, alive or stale, latest first; ``last_seen`` is Redis time in
        seconds."""
        beats = hash_reply(self.client.hgetall(self.key))
        found = [json.loads(info) for info in beats.values()]
        return sorted(found, key=lambda beat: beat.get("last_seen", 0), reverse=True)

    def alive(self, now: float, alive_within: float) -> list[dict[str, Any]]:
        return [beat for beat in self.all() if is_alive(beat, now, alive_within)]
