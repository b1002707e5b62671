"""What a broker's publisher promises the claim -> publish -> ack hand-over: a batch sent
with confirms, and a report of what the broker confirmed or refused."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..layout.record import Record, task_id_of


@dataclass(frozen=True)
class Outgoing:
    """A claimed message on its way to the broker."""

    key: bytes  # its message key in the store
    destination: str  # where the transport puts it: a kombu list, an exchange and key...
    payload: bytes  # the kombu envelope, as stored
    due_ms: int
    expires_ms: int | None = None  # the queue's x-expires, when its publisher declared one

    @classmethod
    def from_record(cls, key: bytes, raw: bytes, own_list: str) -> Outgoing:
        """The outgoing message of a claimed record (``claim_due.lua``'s reply)."""
        record = Record.decode(raw, own_list)
        return cls(key, record.destination, record.payload, record.due_ms, record.expires_ms)

    @property
    def stable_id(self) -> str:
        """The same for every publish of this delayed message (a republish after a mover
        died included), different for another delayed message of the same task: a
        consumer can dedupe on it."""
        return f"{task_id_of(self.key)}@{self.due_ms}"


@dataclass
class PublishReport:
    """What the broker said about a batch of messages."""

    confirmed: list[bytes] = field(default_factory=list)
    refused: dict[bytes, str] = field(default_factory=dict)  # key -> the broker's reason
    #: Set when publishing stopped (the broker became unreachable): every message not
    #: confirmed or refused is in an unknown state.
    error: Exception | None = None

    def unanswered(self, messages: Sequence[Outgoing]) -> list[Outgoing]:
        """The messages neither confirmed nor refused yet."""
        answered = {*self.confirmed, *self.refused}
        return [message for message in messages if message.key not in answered]

    def refuse_unreadable(self, message: Outgoing, exc: Exception) -> None:
        """Refuse a stored message that cannot be made a publish (crafted bytes)."""
        self.refused[message.key] = f"unreadable message: {exc!r}"

    def refuse_unencodable(self, message: Outgoing, exc: Exception) -> None:
        """Refuse a stored message the broker's client cannot encode (a header of a type
        it does not know): this message's fault, not the connection's."""
        self.refused[message.key] = f"cannot be encoded for the broker: {type(exc).__name__}: {exc}"


@dataclass
class Sent:
    """A batch sent to the broker; its report fills as the broker answers."""

    messages: Sequence[Outgoing]
    report: PublishReport = field(default_factory=PublishReport)
    #: The publisher's own record of what is still awaited (None: nothing is).
    awaiting: Any = None


class Publisher(Protocol):
    """Publishes messages to the broker, with confirms, and reports on each.

    ``send`` puts a batch on its way, ``settle`` waits for the broker's answers to it.
    A publisher with ``pipelines`` set returns from ``send`` before the confirms come,
    so the hand-over claims and sends the next batch while the broker takes this one
    in; the others are done when ``send`` returns.
    """

    pipelines: bool

    def send(self, messages: Sequence[Outgoing]) -> Sent: ...

    def settle(self, sent: Sent) -> PublishReport: ...

    def close(self) -> None: ...


class ConfirmedOnReturn:
    """A ``Publisher`` whose batch is confirmed when one call returns (a script call on
    a Redis broker, SQS's synchronous sends): ``send`` publishes it, ``settle`` hands
    back the report."""

    pipelines = False

    def send(self, messages: Sequence[Outgoing]) -> Sent:
        return Sent(messages, self.publish_now(messages))

    def settle(self, sent: Sent) -> PublishReport:
        return sent.report

    def publish_now(self, messages: Sequence[Outgoing]) -> PublishReport:
        raise NotImplementedError
