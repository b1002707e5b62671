"""Evidence from Redis's append-only file: what Redis acknowledged, in order.

With ``appendfsync always`` Redis writes and fsyncs every change before it answers
anyone (a reply, a BRPOP result, a MONITOR line), so the AOF holds exactly the
changes any client could ever have seen, SIGKILLs included; automatic rewrites are
off for the run, so it holds all of them. The harness reads it only for the few
messages the ledger cannot settle on its own:

- a message no worker ever received: did anything push it onto the queue list? If so
  BRPOP took it and the reply was lost (kombu's at-most-once); if not, the store lost it.
- a delivery tag that ran twice without kombu's ``redelivered`` flag: was it pushed twice?
- a message a killed worker held: did its ack reach Redis (``HDEL unacked``)?

And once per run, for every message: was any delivery tag pushed onto the queue list
more than once other than as kombu's redelivery? The store promises exactly once, and
a second copy with the same tag can hide from the executions (kombu keys its
bookkeeping by tag, so one worker holding both may run it once).

Only kombu's own formats are read (the message JSON on the queue list, the
``unacked`` hash), never the store's keys, so a rewrite of the store's internals does
not break it. A script's writes appear as its effects (``LPUSH`` and friends).
"""

from __future__ import annotations

import json
import mmap
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .config import QUEUE

#: How far back from a message's bytes a batched push command may start.
SEARCH_BACK = 16 << 20
_KEY = b"$%d\r\n%s\r\n" % (len(QUEUE), QUEUE.encode())
#: The bytes that open a push onto the queue list, after the array header.
_PUSH_HEADS = [
    b"\r\n$5\r\n%s\r\n%s" % (name, _KEY) for name in (b"LPUSH", b"RPUSH", b"lpush", b"rpush")
]
_TAG = re.compile(rb'"delivery_tag": "([^"]+)"')
_REDELIVERED = b'"redelivered": true'
_BULK = re.compile(rb"\$(\d+)\r\n")
_ARRAY = re.compile(rb"\*(\d+)$")


@dataclass(frozen=True)
class Push:
    """One message pushed onto the queue list."""

    command: str  # LPUSH (a mover, or kombu publishing a due message) or RPUSH (a restore)
    tag: str
    retries: int
    redelivered: bool


class AppendOnlyFile:
    """The AOF files of one Redis data directory, memory-mapped for searching."""

    def __init__(self, directory: Path) -> None:
        self.paths = sorted(p for p in directory.rglob("*.aof") if p.stat().st_size > 0)
        self._maps: list[mmap.mmap] = []
        for path in self.paths:
            with open(path, "rb") as handle:
                self._maps.append(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))

    def close(self) -> None:
        for data in self._maps:
            data.close()

    def __enter__(self) -> AppendOnlyFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def size(self) -> int:
        return sum(len(data) for data in self._maps)

    def pushes(self, task_id: str) -> list[Push]:
        """Every push onto the queue list of a message of ``task_id`` (any retries)."""
        found: dict[int, Push] = {}
        needle = task_id.encode()
        for data in self._maps:
            for at in _occurrences(data, needle):
                located = _push_around(data, at)
                if located is not None:
                    found[located[0]] = located[1]
        return [found[offset] for offset in sorted(found)]

    def fresh_pushes(self) -> Counter[str]:
        """Per delivery tag, how often it was pushed onto the queue list other than as a
        redelivery: celery-delayq promises exactly once for every delayed message."""
        counts: Counter[str] = Counter()
        for data in self._maps:
            for head in _PUSH_HEADS:
                for at in _occurrences(data, head):
                    for value in _values(data, at, head):
                        if _REDELIVERED not in value:
                            tag = _TAG.search(value)
                            counts[tag.group(1).decode() if tag else "?"] += 1
        return counts

    def unacked_changes(self, tag: str) -> tuple[int, int]:
        """How often ``tag`` was written to and removed from kombu's ``unacked`` hash
        (a receipt; an ack, reject or restore)."""
        written = removed = 0
        needle = tag.encode()
        for data in self._maps:
            for at in _occurrences(data, needle):
                before = bytes(data[max(0, at - 40) : at]).lower()
                if before.endswith(b"\r\nhset\r\n$7\r\nunacked\r\n$%d\r\n" % len(needle)):
                    written += 1
                elif before.endswith(b"\r\nhdel\r\n$7\r\nunacked\r\n$%d\r\n" % len(needle)):
                    removed += 1
        return written, removed


def _occurrences(data: mmap.mmap, needle: bytes) -> Iterator[int]:
    at = data.find(needle)
    while at != -1:
        yield at
        at = data.find(needle, at + 1)


def _values(data: mmap.mmap, at: int, head: bytes) -> Iterator[bytes]:
    """The values pushed by the push command whose head starts at ``at``."""
    array = _ARRAY.search(bytes(data[max(0, at - 12) : at]))
    position = at + len(head)
    for _ in range(int(array.group(1)) - 2 if array else 0):
        bulk = _BULK.match(data, position)
        if bulk is None:
            return
        end = bulk.end() + int(bulk.group(1))
        yield bytes(data[bulk.end() : end])
        position = end + 2


def _push_around(data: mmap.mmap, at: int) -> tuple[int, Push] | None:
    """The push whose value holds offset ``at``, if any: (value offset, push).

    Commands do not nest and a JSON value holds no raw CR LF, so only the nearest push
    before ``at`` can hold it.
    """
    floor = max(0, at - SEARCH_BACK)
    head = max((data.rfind(h, floor, at), h) for h in _PUSH_HEADS)
    if head[0] == -1:
        return None
    array = _ARRAY.search(bytes(data[max(0, head[0] - 12) : head[0]]))
    if array is None:
        return None
    command = head[1][6:11].decode().upper()
    position = head[0] + len(head[1])
    for _ in range(int(array.group(1)) - 2):  # the values after the command and the key
        bulk = _BULK.match(data, position)
        if bulk is None:
            return None
        start, end = bulk.end(), bulk.end() + int(bulk.group(1))
        if start <= at < end:
            return start, _parse(command, bytes(data[start:end]))
        if start > at:
            return None
        position = end + 2
    return None


def _parse(command: str, value: bytes) -> Push:
    message = json.loads(value)
    headers = message.get("headers") or {}
    properties = message.get("properties") or {}
    return Push(
        command=command,
        tag=str(properties.get("delivery_tag")),
        retries=int(headers.get("retries") or 0),
        redelivered=bool(headers.get("redelivered")),
    )
