"""The store's record and message-key encodings, without a server."""

from __future__ import annotations

import json

import pytest

from celery_delayq.core.layout.record import (
    Record,
    is_duplicate,
    is_key_index,
    key_index_field,
    message_key,
    task_id_of,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("delay_key", [None, b"user:42", b"k3:x:\xff"])
@pytest.mark.parametrize("expires_ms", [None, 30_000])
@pytest.mark.parametrize("destination", ["q", "q\x06\x163", "other:q"])
def test_record_round_trips_due_time_destination_expiry_key_and_payload(
    destination, expires_ms, delay_key
):
    record = Record(1_763_712_000_123, destination, b"5:abc:d3:x9:payload", expires_ms, delay_key)
    assert Record.decode(record.encode("q"), "q") == record
    assert len(record.encode("q")) < len(record.encode("elsewhere")) or destination != "q"


@pytest.mark.parametrize(
    ("payload", "inline"),
    [
        (b'{"body": "", "headers": {}}', True),
        (b'{"delayq": 5, "body": ""}', True),  # a moved envelope, stored again
        (b"{}", False),
        (b"[1]", False),
        (b"5:abc", False),
    ],
)
def test_an_envelope_for_the_queues_own_list_is_stored_inline(payload, inline):
    """An inline record is what the mover pushes whole: the envelope with its due time as
    the first key; decoding gives the envelope back (a carried due-time key dropped)."""
    record = Record(1_763_712_000_123, "q", payload)
    encoded = record.encode("q")
    assert encoded.startswith(b'{"delayq":1763712000123,') == inline
    decoded = Record.decode(encoded, "q")
    assert (decoded.due_ms, decoded.destination) == (record.due_ms, "q")
    if inline:
        assert json.loads(encoded) == {**json.loads(payload), "delayq": 1_763_712_000_123}
        assert decoded.payload == payload.replace(b'"delayq": 5, ', b"")
    else:
        assert decoded.payload == payload


@pytest.mark.parametrize(
    "record",
    [
        Record(1, "elsewhere", b'{"a": 1}'),
        Record(1, "q", b'{"a": 1}', expires_ms=5),
        Record(1, "q", b'{"a": 1}', delay_key=b"k"),
    ],
)
def test_a_record_with_fields_is_prefixed_whatever_its_payload(record):
    assert record.encode("q").startswith(b"1")
    assert Record.decode(record.encode("q"), "q") == record


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b":x",
        b"12",
        b"12d",
        b"12d3:q",
        b"12x:p",
        b"12xx1:p",
        b"12k9:ab:p",
        b"12k:p",
        b'{"delayq":12}',
        b'{"delayq":,"a": 1}',
    ],
)
def test_a_malformed_record_is_refused(raw):
    with pytest.raises(ValueError):
        Record.decode(raw, "q")


@pytest.mark.parametrize(
    ("task_id", "size"),
    [
        ("0b5e9e5c-3f7e-4e4c-9a37-6f0d2f1f8a10", 16),
        ("0B5E9E5C-3F7E-4E4C-9A37-6F0D2F1F8A10", 37),
        ("t1", 3),
        ("x" * 15, 17),
        ("x" * 16, 17),
        ("tâsk:1", 8),
    ],
)
def test_message_keys_pack_uuids_and_stand_for_their_task_ids(task_id, size):
    key = message_key(task_id, "delivery-tag")
    assert (task_id_of(key), len(key)) == (task_id, size)
    assert task_id_of(message_key(None, "delivery-tag")) == ""


@pytest.mark.parametrize("delay_key", [b"", b"k", b"x" * 15, b"x" * 16, b"\xff1:abc"])
def test_a_key_index_field_is_neither_a_task_key_nor_a_duplicate(delay_key):
    field = key_index_field(delay_key)
    assert len(field) != 16 and is_key_index(field) and not is_duplicate(field)
    assert not is_key_index(message_key("0b5e9e5c-3f7e-4e4c-9a37-6f0d2f1f8a10", "m"))
