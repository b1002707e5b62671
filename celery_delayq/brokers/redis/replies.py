"""The consume path's scripts (lua/consume.lua, return_landed.lua, name.lua), and how the
consumer reads what consume.lua hands back: the message taken, and its envelope as kombu
will read it, checked before kombu sees it."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import redis
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads
from redis.commands.core import Script

from ...core.lua import register_all, script_source
from ..common.message import Delivered
from .polling import UnreadableMessage


@dataclass(frozen=True)
class ConsumeScripts:
    """The consume path's two scripts (brokers/redis/lua), bound to one client."""

    consume: Script
    return_landed: Script
    name: Script

    @classmethod
    def register(cls, client: redis.Redis) -> ConsumeScripts:
        return register_all(cls, client, SOURCES)


#: Read at import, like the store's scripts.
SOURCES = {
    f.name: script_source(__name__.rpartition(".")[0], f.name)
    for f in dataclasses.fields(ConsumeScripts)
}


@dataclass(frozen=True)
class Taken:
    """A message consume.lua replied with: taken (recorded under ``tag`` unless it is
    empty), or, with a ``reason``, left in its list because it cannot be read."""

    message: bytes
    tag: str
    reason: str

    @classmethod
    def of(cls, reply: list[Any]) -> Taken:
        _, message, tag, reason = reply
        return cls(message, bytes_to_str(tag), bytes_to_str(reason))


@dataclass(frozen=True)
class Delivering:
    """The message the consumer is handing to kombu's consumer callback now."""

    tag: Any  # its delivery tag, as kombu reads it
    delivered: Delivered


def read_payload(message: bytes, tag: str = "") -> dict[str, Any]:
    """The envelope of a taken message, as kombu reads it; UnreadableMessage if it is not
    a JSON object (Python's JSON may refuse what Redis's accepted: deep nesting, say, a
    broken body consume.lua skimmed over, or one of kombu's typed values,
    ``{"__type__": ..., "__value__": ...}``, that does not decode), or if its delivery tag
    is not the ``tag`` consume.lua recorded it under (kombu would ack another entry, and
    the recorded one would come back to run again)."""
    try:
        payload = loads(bytes_to_str(message))
    except Exception as exc:  # anything hostile JSON makes kombu's decoder raise
        raise UnreadableMessage(f"not JSON kombu reads: {exc!r}"[:300]) from None
    if not isinstance(payload, dict):
        raise UnreadableMessage("not a JSON object")
    properties = payload.get("properties")
    if not isinstance(properties, dict):
        raise UnreadableMessage('no "properties" object')
    if tag and properties.get("delivery_tag") != tag:
        raise UnreadableMessage("its delivery tag reads differently in Redis and in Python")
    parts = payload.get("headers", {}), properties.get("delivery_info", {})
    if not all(isinstance(part, dict) for part in parts):
        # kombu's restore writes "redelivered" into both when present (null too: it then
        # fails, and the message is lost); Redis's cjson reads [] as {}
        raise UnreadableMessage('its "headers" or "delivery_info" would make its restore fail')
    return payload


def checked_tag(message: bytes) -> str:
    """The delivery tag of a message consume.lua recorded under a provisional tag (too
    big to read whole in Redis, and not one its skim could follow), checked as consume.lua
    checks what it reads; UnreadableMessage if the message cannot be taken."""
    properties = read_payload(message)["properties"]
    tag = properties.get("delivery_tag")
    if not isinstance(tag, str) or not tag or not all(" " <= c <= "~" for c in tag):
        raise UnreadableMessage('no "delivery_tag" (a string of printable ASCII)')
    priority = properties.get("priority")
    if isinstance(priority, float) and math.isinf(priority):
        raise UnreadableMessage('its "priority" would make its restore fail')
    return tag
