"""Every key of a Redis as readable JSON, and back: the format fixtures' file format.

A file holds, per database, each key with its type, its expiry (an absolute instant,
Redis clock, so an expired key is simply not loaded) and its contents. Bytes are spelt
one character per byte (latin-1), so JSON escapes what is not printable ASCII and every
byte comes back exactly; hash fields and set members are sorted, zset members are listed
in score order, so the file is the same for the same data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis


def text(raw: bytes) -> str:
    return raw.decode("latin-1")


def raw(value: str) -> bytes:
    return value.encode("latin-1")


def _score(score: float) -> float | int:
    return int(score) if score.is_integer() else score


def dump_key(client: redis.Redis, key: bytes, now_ms: int) -> dict[str, Any]:
    """One key as a JSON-ready dict."""
    read: Any = client  # redis-py's replies are typed loosely
    kind = read.type(key).decode()
    value: Any
    if kind == "string":
        value = text(read.get(key))
    elif kind == "hash":
        value = {text(f): text(v) for f, v in sorted(read.hgetall(key).items())}
    elif kind == "zset":
        members = read.zrange(key, 0, -1, withscores=True)
        value = [[text(m), _score(s)] for m, s in sorted(members, key=lambda e: (e[1], e[0]))]
    elif kind == "set":
        value = sorted(text(m) for m in read.smembers(key))
    elif kind == "list":
        value = [text(item) for item in read.lrange(key, 0, -1)]
    else:
        raise ValueError(f"cannot dump {key!r}: a {kind}")
    ttl = int(read.pttl(key))
    return {
        "key": text(key),
        "type": kind,
        "expires_at_ms": now_ms + ttl if ttl >= 0 else None,
        "value": value,
    }


def server_time_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()  # type: ignore[misc]
    return int(seconds) * 1000 + int(micros) // 1000


def dump_db(client: redis.Redis) -> list[dict[str, Any]]:
    """Every key of the client's database, sorted by name."""
    now_ms = server_time_ms(client)
    return [dump_key(client, key, now_ms) for key in sorted(client.scan_iter(count=1000))]


def load_key(client: redis.Redis, entry: dict[str, Any], now_ms: int) -> bool:
    """Write one dumped key; False when it had expired by ``now_ms`` (not written)."""
    expires_at = entry["expires_at_ms"]
    if expires_at is not None and expires_at <= now_ms:
        return False
    key, value, kind = raw(entry["key"]), entry["value"], entry["type"]
    if kind == "string":
        client.set(key, raw(value))
    elif kind == "hash":
        client.hset(key, mapping={raw(f): raw(v) for f, v in value.items()})
    elif kind == "zset":
        client.zadd(key, {raw(member): score for member, score in value})
    elif kind == "set":
        client.sadd(key, *(raw(member) for member in value))
    elif kind == "list":
        client.rpush(key, *(raw(item) for item in value))
    else:
        raise ValueError(f"cannot load {entry['key']!r}: a {kind}")
    if expires_at is not None:
        client.pexpireat(key, expires_at)
    return True


def load_db(client: redis.Redis, entries: list[dict[str, Any]]) -> int:
    """Write the dumped keys into the client's (empty) database; how many were written."""
    now_ms = server_time_ms(client)
    return sum(load_key(client, entry, now_ms) for entry in entries)


def write_fixture(path: Path, fixture: dict[str, Any]) -> None:
    path.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")


def read_fixture(path: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = json.loads(path.read_text())
    return fixture
