"""How one delayed message is written in Redis: its record and its message key.

A record has one of two forms:

- **inline**, ``{"delayq":<due ms>,<the payload after its "{">``: a kombu envelope
  (a JSON object) going to the queue's own list, with no other field. The due time is
  the envelope's first key, so the mover pushes the record whole: cutting a prefix off
  would copy every payload inside Redis, a quarter of a move's cost. The key stays in
  the delivered envelope, where kombu and Celery ignore it. Most records are inline.
- **prefixed**, ``<due ms>[d<len>:<destination>][x<ms>][k<len>:<delay key>][l<len>:<gate>]:
  <payload>``:
  the due time, the kombu list to push to when it is not the queue's own list (a
  priority sub-list, say), the queue's ``x-expires`` when the publisher declared one
  (the move refreshes the queue lists' expiry, as kombu's own publish does), the delay
  key of a keyed message (delay_keys.py; the move releases it), the gate of a
  flow-controlled one (gates.py: the move puts it in its bucket), and the payload bytes
  exactly as kombu would have pushed them; also any payload that is not a JSON object.
  The mover cuts the prefix off and pushes the payload.

Either way no JSON is ever decoded inside Redis, and ``decode`` gives back the payload
that was stored. ``decode`` and the Lua ``parse`` (lua/helpers.lua) read records by one
grammar: every number is 1 to ``MAX_DIGITS`` ASCII digits (no sign, exponent, hex or
space), a counted field's bytes lie within the record, and a destination is never empty.
A record outside it is unreadable; a move dead-letters it with the reason.

Records are keyed by the Celery task id, packed small because every pending message
carries its key twice (record hash and page of due times): a canonical uuid becomes its
16 bytes; any other id ``\\x00`` + its text; a message without a task id ``\\x03`` + its
delivery tag; a second message of the same task id ``\\xff<seq>:<task key>``, indexed by
task in ``P:{Q}:dup:by-task`` (``extra_prefix``; stores written before that index listed
the sequence numbers under the task key in ``P:{Q}:dup``, which is still read). Only a uuid
key is 16 bytes long (a uuid may start with any byte): any other key that would be 16
bytes long is prefixed with ``\\x02``.

The duplicates hash (``P:{Q}:dup``) also indexes the pending keyed messages: field
``\\x04<delay key>`` (``key_index_field``) holds ``<since ms>:<message key>``.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

UUID_SIZE = 16
TEXT_ID = b"\x00"
NOT_UUID = b"\x02"
NO_TASK_ID = b"\x03"
DUPLICATE = b"\xff"
KEY_INDEX = b"\x04"
#: Most digits of a number in a record (``MAX_DIGITS`` in lua/helpers.lua): Lua's
#: doubles hold every such number exactly.
MAX_DIGITS = 15
_ASCII_DIGITS = re.compile(rb"[0-9]+")
#: How an inline record starts, before its due time (``INLINE`` in lua/helpers.lua).
INLINE_PREFIX = b'{"delayq":'
#: The due-time key a payload may already carry: a moved message's envelope, stored
#: again (rescued, or restored by kombu, which re-serialises it with spaces).
_CARRIED_DUE = re.compile(rb'\{"delayq": ?\d+, ?')


def task_key(task_id: str) -> bytes:
    """The message key of a task's (first) message."""
    if len(task_id) == 36 and task_id[8] == task_id[13] == task_id[18] == task_id[23] == "-":
        digits = task_id.replace("-", "")
        try:  # a canonical uuid: 32 lowercase hex digits (hex() gives them back only then)
            packed = bytes.fromhex(digits)
            if packed.hex() == digits:
                return packed
        except ValueError:
            pass
    return _not_uuid_sized(TEXT_ID + task_id.encode("utf-8", "surrogatepass"))


def message_key(task_id: str | None, message_id: str) -> bytes:
    """The message key of a message: by task id, or by delivery tag when it has none."""
    if task_id:
        return task_key(task_id)
    return _not_uuid_sized(NO_TASK_ID + message_id.encode("utf-8", "surrogatepass"))


def duplicate_key(task_key: bytes, seq: bytes) -> bytes:
    """The message key of a task's extra message number ``seq`` (as schedule.lua forms it)."""
    return _not_uuid_sized(DUPLICATE + seq + b":" + task_key)


def extra_prefix(task_key: bytes) -> bytes:
    """The start of every member of ``P:{Q}:dup:by-task`` indexing one task's extra
    messages (``extra_prefix`` in lua/prelude.lua): each member is it and a sequence
    number, so one task's members are one lexicographic range."""
    return b"%d:%s" % (len(task_key), task_key)


def split_extra(member: bytes) -> tuple[bytes, bytes] | None:
    """The task key and sequence number of a ``P:{Q}:dup:by-task`` member; None for a
    member this store did not write."""
    length, _, rest = member.partition(b":")
    if not _ASCII_DIGITS.fullmatch(length) or int(length) >= len(rest):
        return None
    return rest[: int(length)], rest[int(length) :]


def key_index_field(delay_key: bytes) -> bytes:
    """The duplicates-hash field indexing a delay key (as ``index_field`` in prelude.lua)."""
    return _not_uuid_sized(KEY_INDEX + delay_key)


def is_key_index(field: bytes) -> bool:
    """Whether a duplicates-hash field indexes a delay key (rather than listing a task's
    extra messages)."""
    return len(field) != UUID_SIZE and field.removeprefix(NOT_UUID)[:1] == KEY_INDEX


def _not_uuid_sized(key: bytes) -> bytes:
    """The key, prefixed so it cannot pass for a packed uuid if it is 16 bytes long
    (``duplicate_key`` in lua/prelude.lua does the same)."""
    return NOT_UUID + key if len(key) == UUID_SIZE else key


def is_duplicate(key: bytes) -> bool:
    return len(key) != UUID_SIZE and key.removeprefix(NOT_UUID)[:1] == DUPLICATE


def task_id_of(key: bytes) -> str:
    """The Celery task id a message key stands for ("" for a message without one)."""
    if len(key) == UUID_SIZE:
        return str(uuid.UUID(bytes=key))
    key = key.removeprefix(NOT_UUID)
    if key[:1] == DUPLICATE:
        return task_id_of(key[key.index(b":") + 1 :])
    if key[:1] == TEXT_ID:
        return key[1:].decode("utf-8", "surrogatepass")
    return ""


class Record(NamedTuple):
    """One stored delayed message."""

    due_ms: int
    destination: str  # the kombu list it is pushed to
    payload: bytes
    expires_ms: int | None = None  # the queue's x-expires, as the publisher knew it
    delay_key: bytes | None = None  # a keyed message's key (delay_keys.py)
    gate: bytes | None = None  # a flow-controlled message's limits and bucket (gates.py)

    def encode(self, own_list: str) -> bytes:
        """The record as stored, built here rather than in ``schedule.lua``: joining the
        due time to the payload in Lua costs a copy of the payload in Redis."""
        plain = self.destination == own_list and self.expires_ms is None
        unmarked = self.delay_key is None and self.gate is None
        if plain and unmarked and self.payload.startswith(b'{"'):
            carried = _CARRIED_DUE.match(self.payload)
            rest = self.payload[carried.end() :] if carried else self.payload[1:]
            return b"%s%d,%s" % (INLINE_PREFIX, self.due_ms, rest)
        record = b"%d" % self.due_ms
        if self.destination != own_list:
            destination = self.destination.encode("utf-8", "surrogateescape")
            record += b"d%d:%s" % (len(destination), destination)
        if self.expires_ms is not None:
            record += b"x%d" % self.expires_ms
        if self.delay_key is not None:
            record += b"k%d:%s" % (len(self.delay_key), self.delay_key)
        if self.gate is not None:
            record += b"l%d:%s" % (len(self.gate), self.gate)
        return record + b":" + self.payload

    @classmethod
    def decode(cls, raw: bytes, own_list: str) -> Record:
        """Read a record of a queue whose own list is ``own_list``; ValueError if unreadable."""
        if raw.startswith(INLINE_PREFIX):
            due, pos = _digits(raw, len(INLINE_PREFIX))
            if raw[pos : pos + 1] != b",":
                raise ValueError(f"not a delayed-message record: {raw[:40]!r}")
            return cls(due, own_list, b"{" + raw[pos + 1 :])
        due, pos = _digits(raw, 0)
        destination = own_list
        if raw[pos : pos + 1] == b"d":
            value, pos = _counted(raw, pos + 1)
            if not value:
                raise ValueError(f"not a delayed-message record (empty destination): {raw[:40]!r}")
            destination = value.decode("utf-8", "surrogateescape")
        expires, delay_key, gate, pos = _marks(raw, pos)
        if raw[pos : pos + 1] != b":":
            raise ValueError(f"not a delayed-message record: {raw[:40]!r}")
        return cls(due, destination, raw[pos + 1 :], expires, delay_key, gate)

    @classmethod
    def decode_or_raw(cls, raw: bytes, own_list: str, due_ms: int) -> Record:
        """For display: a record this store did not write is shown whole, as payload."""
        try:
            return cls.decode(raw, own_list)
        except ValueError:
            return cls(due_ms, "", raw)


def _marks(raw: bytes, pos: int) -> tuple[int | None, bytes | None, bytes | None, int]:
    """A prefixed record's optional x-expires, delay key and gate at ``pos``, and the
    index after them."""
    expires, delay_key, gate = None, None, None
    if raw[pos : pos + 1] == b"x":
        expires, pos = _digits(raw, pos + 1)
    if raw[pos : pos + 1] == b"k":
        delay_key, pos = _counted(raw, pos + 1)
    if raw[pos : pos + 1] == b"l":
        gate, pos = _counted(raw, pos + 1)
    return expires, delay_key, gate, pos


def _counted(raw: bytes, start: int) -> tuple[bytes, int]:
    """The ``<len>:<bytes>`` field at ``start`` and the index after it."""
    length, colon = _digits(raw, start)
    if raw[colon : colon + 1] != b":" or colon + 1 + length > len(raw):
        raise ValueError(f"not a delayed-message record: {raw[:40]!r}")
    return raw[colon + 1 : colon + 1 + length], colon + 1 + length


def _digits(raw: bytes, start: int) -> tuple[int, int]:
    """The decimal number at ``start`` (1 to MAX_DIGITS ASCII digits) and the index
    after it; ValueError if none."""
    found = _ASCII_DIGITS.match(raw, start)
    if found is None or found.end() - start > MAX_DIGITS:
        raise ValueError(f"not a delayed-message record: {raw[:40]!r}")
    return int(found.group()), found.end()
