"""A start log: tasks note when they started, so the demo can compare that with their ETA.

It lives in the broker's Redis, one hash per demo run (field = task label, value =
JSON ``{"eta": ISO 8601 or null, "started": epoch seconds}``). A hash per run keeps
runs against a shared ``REDIS_URL`` apart, and the TTL cleans up after them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import cast

import redis

KEY_PREFIX = "delayq-demo:starts:"
TTL_SECONDS = 3600


@dataclass(frozen=True)
class Start:
    """When one task run started, and the ETA its message carried (None: no ETA)."""

    started: float  # epoch seconds
    eta: datetime | None


@cache
def _client(url: str) -> redis.Redis:
    """One client per URL and process (prefork children each build their own)."""
    return redis.Redis.from_url(url, decode_responses=True)


def record(url: str, run: str, label: str, eta: str | datetime | None) -> None:
    """Note that the task ``label`` starts now; call it first thing in the task."""
    started = time.time()  # before any Redis round trip, so the lateness is honest
    if isinstance(eta, datetime):
        eta = eta.isoformat()
    key = KEY_PREFIX + run
    with _client(url).pipeline() as pipe:
        pipe.hset(key, label, json.dumps({"started": started, "eta": eta}))
        pipe.expire(key, TTL_SECONDS)
        pipe.execute()


def read_all(url: str, run: str) -> dict[str, Start]:
    """Every start noted so far in ``run``, by task label."""
    raw = cast("dict[str, str]", _client(url).hgetall(KEY_PREFIX + run))  # decoded replies
    starts = {}
    for label, value in raw.items():
        fields = json.loads(value)
        eta = datetime.fromisoformat(fields["eta"]) if fields["eta"] else None
        starts[label] = Start(fields["started"], eta)
    return starts
