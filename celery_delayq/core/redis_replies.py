"""redis-py's replies with their types: its hints allow an awaitable for every command
(one set of hints serves its sync and async clients); a sync client's reply is checked
here once, so callers read a typed value instead of silencing the type checker."""

from __future__ import annotations


def hash_reply(reply: object) -> dict[bytes, bytes]:
    """An ``HGETALL`` reply."""
    if not isinstance(reply, dict):
        raise TypeError(f"expected a hash reply, got {type(reply).__name__}")
    return reply


def list_reply(reply: object) -> list[bytes]:
    """An ``LRANGE`` or ``ZRANGE`` reply (without scores)."""
    if not isinstance(reply, list):
        raise TypeError(f"expected a list reply, got {type(reply).__name__}")
    return reply
