"""A delayed call's message as a template: the first delayed call of each set of options
runs ``apply_async`` itself (its store write captured), and every further call with the
same options gets a copy with what differs from call to call put in, computed as Celery
computes it (task id, ``eta``, ``argsrepr``/``kwargsrepr``, the body, the delivery tag),
so workers cannot tell the messages apart (bulk.py).

A flow-controlled task's copy carries its template's gate (core/layout/gates.py), which
the diverter computed for the template from its headers (config/limits.py): the gate is
made of the task name and the limit key header alone, and a copy's headers are its
template's but for the per-call fields, so a call with another limit key (another
``headers`` option) has another template. Like a single publish, a limited copy is kept
even when due, and one without an ETA is due now (``no_eta``): it enters its bucket as
its chunk is stored."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from typing import Any

from celery import Celery, Task, signals
from celery.utils.saferepr import saferepr

try:  # Celery 5.6 adds elapsed seconds in UTC (across a daylight-saving change)
    from celery.utils.time import add_seconds_to_datetime as _add_seconds
except ImportError:  # Celery 5.5: plain addition

    def _add_seconds(moment: datetime, seconds: float) -> datetime:
        return moment + timedelta(seconds=seconds)


from json.encoder import encode_basestring_ascii as encode_string

from kombu.serialization import loads as deserialize
from kombu.serialization import registry
from kombu.utils.json import dumps, loads

from ..brokers.common.limit_keys import RECEIVER_UID, takes_argument_keys
from ..brokers.common.message import due_ms, eta_timestamp
from ..config.settings import config_of
from ..core.store import Scheduled


def templates_apply(app: Celery) -> bool:
    """Whether copies of a template are the messages Celery would send: not while
    publish signals have receivers (they may change each message), nor with compression.
    The limit-key receiver (another app of the process takes keys from arguments)
    changes no message of an app whose tasks take none."""
    before = signals.before_task_publish.receivers
    if before and not takes_argument_keys(app):
        before = [receiver for receiver in before if receiver[0][0] != RECEIVER_UID]
    receivers = before or signals.after_task_publish.receivers
    return not receivers and not app.conf.task_compression


@dataclass(frozen=True)
class _Conventions:
    """What Celery reads from the app to build a message (celery.app.amqp.as_task_v2),
    read once."""

    zone: tzinfo  # the app's timezone: ETAs from a countdown are written in it
    naive_zone: Any  # how celery-delayq reads an ETA without an offset
    args_max: int
    kwargs_max: int
    repr_options: dict[str, Any]

    @classmethod
    def of(cls, app: Celery) -> _Conventions:
        levels = app.conf.get("task_repr_maxlevels")  # from Celery 5.6
        return cls(
            zone=app.timezone,
            naive_zone=config_of(app).timezone,
            args_max=app.amqp.argsrepr_maxsize,
            kwargs_max=app.amqp.kwargsrepr_maxsize,
            repr_options={} if levels is None else {"maxlevels": levels},
        )

    def eta(self, countdown: Any, eta: Any) -> tuple[str, float] | None:
        """The ``eta`` header Celery writes for these options, and when that is."""
        if countdown:
            moment = _add_seconds(datetime.now(self.zone), countdown)
            return moment.isoformat(), moment.timestamp()
        if isinstance(eta, datetime) and eta.tzinfo is not None:
            return eta.isoformat(), eta.timestamp()
        header = eta if isinstance(eta, str) else eta.isoformat() if eta else None
        return None if header is None else (header, eta_timestamp(header, self.naive_zone))

    def reprs(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[str, str]:
        """``argsrepr`` and ``kwargsrepr`` as Celery writes them."""
        return (
            _plain_repr(args, self.args_max) or saferepr(args, self.args_max, **self.repr_options),
            _plain_repr(kwargs, self.kwargs_max)
            or saferepr(kwargs, self.kwargs_max, **self.repr_options),
        )


_SCALARS = (int, float, bool, type(None))


def _plain_repr(value: Any, limit: int) -> str | None:
    """``repr(value)``, when it is what ``saferepr`` gives (a flat tuple, list or dict of
    numbers, booleans, None and strings that repr leaves as they are, shorter than the
    limit); else None. saferepr walks every value in Python: this is ~10x cheaper."""
    values = value.values() if type(value) is dict else value
    if type(value) not in (tuple, list, dict) or not all(map(_is_plain, values)):
        return None
    if type(value) is dict and not all(map(_is_plain_str, value)):
        return None
    text = repr(value)
    return text if len(text) < limit else None


def _is_plain(item: Any) -> bool:
    return type(item) in _SCALARS or _is_plain_str(item)


def _is_plain_str(item: Any) -> bool:
    return type(item) is str and item.isprintable() and "'" not in item and "\\" not in item


def _uuid4s(batch: int = 256) -> Iterator[str]:
    """Random (version 4) UUIDs as Celery's and kombu's ``uuid()`` make them, from one
    ``os.urandom`` call per ``batch``: the system call costs more than the rest of a copy
    on some virtual machines."""
    while True:
        random = bytearray(os.urandom(16 * batch))
        for start in range(0, 16 * batch, 16):
            # version 4 and the RFC 4122 variant, as uuid.UUID(bytes=..., version=4) sets them
            random[start + 6] = (random[start + 6] & 0x0F) | 0x40
            random[start + 8] = (random[start + 8] & 0x3F) | 0x80
            digits = random[start : start + 16].hex()
            yield f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


#: Stands for a per-call value in a template's JSON while it is cut into pieces.
_MARK = "@@celery-delayq-field-{}@@"


@dataclass(frozen=True)
class Template:
    """A captured delayed message, its JSON cut around what differs per call: a copy is
    the pieces joined with that call's values, JSON-quoted as the encoder quotes them."""

    scheduled: Scheduled
    pieces: list[str]  # the JSON around the per-call fields, one more than there are
    fields: list[str]  # which value goes after each piece but the last
    embed: Any  # the body's third part: callbacks, errbacks, chain, chord
    encode: Callable[[Any], Any]  # the serializer's encoder
    header: Callable[..., Any] | None  # the task's argument check (when typing is on)
    conventions: _Conventions
    uuids: Iterator[str]  # of this template's thread (a generator runs in one at a time)

    @classmethod
    def of(
        cls, app: Celery, task: Task, scheduled: Scheduled, options: Mapping[str, Any]
    ) -> Template | None:
        """The template of a captured message, or None when a copy could differ from
        what Celery sends (a body or JSON this module cannot remake exactly)."""
        envelope = loads(scheduled.payload)
        serializer = options.get("serializer") or app.conf.task_serializer
        body = base64.b64decode(envelope["body"])
        decoded = deserialize(body, envelope["content-type"], envelope["content-encoding"])
        # kombu's own encoder for the serializer: its dumps() around it costs as much again
        codec = registry._encoders.get(serializer)
        if codec is None or codec.content_type != envelope["content-type"]:
            return None
        if _as_bytes(codec.encoder(decoded)) != body:
            return None
        values, marked = _mark_fields(envelope, scheduled.message_id)
        text = dumps(envelope)
        marks = [encode_string(_MARK.format(n)) for n in range(len(marked))]
        if any(text.count(mark) != 1 for mark in marks):
            return None
        in_order = sorted(range(len(marks)), key=lambda n: text.index(marks[n]))
        pieces: list[str] = []
        for n in in_order:
            piece, _, text = text.partition(marks[n])
            pieces.append(piece)
        pieces.append(text)
        fields = [marked[n] for n in in_order]
        conventions = _Conventions.of(app)
        embed = decoded[2]
        header = task.__header__ if task.typing else None
        template = cls(
            scheduled, pieces, fields, embed, codec.encoder, header, conventions, _uuid4s()
        )
        own = {field: _json(value) for field, value in values.items()}
        if template.payload(own) != scheduled.payload:
            return None
        return template

    def payload(self, values: Mapping[str, str]) -> bytes:
        """The JSON with these per-call values, each as JSON text (``_json``)."""
        parts = [self.pieces[0]]
        for field, piece in zip(self.fields, self.pieces[1:]):
            parts += (values[field], piece)
        return "".join(parts).encode()

    def fill(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> Scheduled | None:
        """This template's message for one call; None when it is unlimited and its ETA
        is not ahead (then it is published at once, by ``apply_async``)."""
        eta = self.conventions.eta(options.get("countdown"), options.get("eta"))
        gate = self.scheduled.gate
        if gate is None and (eta is None or eta[1] <= time.time()):
            return None
        if self.header is not None:
            self.header(*args, **kwargs)  # raises TypeError as apply_async does
        task_id = str(options.get("task_id") or next(self.uuids))
        message_id = next(self.uuids)
        argsrepr, kwargsrepr = self.conventions.reprs(args, kwargs)
        body = self.encode((args, kwargs, self.embed))
        values = {
            "body": encode_string(base64.b64encode(_as_bytes(body)).decode("ascii")),
            "id": encode_string(task_id),
            "eta": _json(eta[0] if eta else None),
            "argsrepr": encode_string(argsrepr),
            "kwargsrepr": encode_string(kwargsrepr),
            "message_id": encode_string(message_id),
        }
        template = self.scheduled
        due = due_ms(time.time(), no_eta=True) if eta is None else due_ms(eta[1])
        payload = self.payload(values)
        # positional: a NamedTuple takes keywords slower, and this runs once per copy
        return Scheduled(
            template.queue, message_id, task_id, due, template.destination, payload,
            template.expires_ms, None, gate, eta is None,
        )  # fmt: skip


def _mark_fields(
    envelope: dict[str, Any], message_id: str
) -> tuple[dict[str, str | None], list[str]]:
    """Put a mark where each per-call value is in the envelope (in place); the template's
    own values (``eta`` None: a limited task's message sent without one), and which value
    each mark stands for, in order."""
    headers, properties = envelope["headers"], envelope["properties"]
    task_id = headers["id"]
    values = {
        "body": envelope["body"],
        "id": task_id,
        "eta": headers["eta"],
        "argsrepr": headers["argsrepr"],
        "kwargsrepr": headers["kwargsrepr"],
        "message_id": message_id,
    }
    places: list[tuple[dict[str, Any], str, str]] = [
        (envelope, "body", "body"),
        (headers, "id", "id"),
        (headers, "eta", "eta"),
        (headers, "argsrepr", "argsrepr"),
        (headers, "kwargsrepr", "kwargsrepr"),
    ]
    if headers.get("root_id") == task_id:  # a task sent from outside a task
        places.append((headers, "root_id", "id"))
    if properties.get("correlation_id") == task_id:
        places.append((properties, "correlation_id", "id"))
    if properties.get("delivery_tag") == message_id:  # kombu's virtual transports
        places.append((properties, "delivery_tag", "message_id"))
    fields = []
    for n, (holder, key, field) in enumerate(places):
        holder[key] = _MARK.format(n)
        fields.append(field)
    return values, fields


def _json(value: str | None) -> str:
    """A per-call value as the template's JSON spells it (``eta`` None: null)."""
    return "null" if value is None else encode_string(value)


def _as_bytes(body: Any) -> bytes:
    return body if isinstance(body, bytes) else str(body).encode("utf-8")
