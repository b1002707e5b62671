"""Publishes due messages to an AMQP broker with batched publisher confirms.

py-amqp's own confirm mode waits for each message's confirm before the next publish,
a round trip per message. Here a whole batch is published (``mandatory``, so an
unroutable message comes back instead of vanishing), then the confirms are collected:
RabbitMQ sends ``basic.return`` for an unroutable message before its ``basic.ack``,
and ``basic.nack`` for one it could not take. A channel error (an exchange that does
not exist, a message above ``max_message_size``) closes the channel and says nothing
of which message caused it, so the messages not yet confirmed are then published one
by one, to refuse only the one that fails.

RabbitMQ routes the messages published before the one that closes the channel, but
sends no confirm for those not confirmed yet once it is closed: published again, they
would arrive twice. So an exchange is looked up (a passive declare, on a channel of its
own) before the first publish to it on a connection, and again after a channel error;
a message to a missing one is refused without being published, and the channel stays
open. A publish that fails only once sent (an exchange deleted after its look-up, a
message over ``max_message_size``) still closes the channel: the messages published
before it and not yet confirmed then go again, with the same stable id.

``send`` writes a batch in writes of about ``WRITE_BYTES``, each as soon as its frames
are built, so the broker takes in the first messages while the rest are encoded, and
returns; ``settle`` waits for the batch's confirms. Between the two the hand-over claims
and sends its next batch, so several batches may be awaited on one channel at once: each
listens for the answers about its own delivery tags.

A broker that accepts the connection and then stops answering (a hung node, a network
path that drops its replies) is given up after ``confirm_timeout`` without an answer,
to an exchange's look-up as to a batch's confirms: ``ConfirmTimeout``, reported to the
hand-over like a broken connection (the claims come back, no try counted). The
connection is then dropped without the closing handshake, and the next pass connects
again; a batch the broker took before it went silent may have been routed, and goes
again with the same stable id. A batch still awaited on the connection given up is not
sent again on a new one in the same pass (``ConnectionGivenUp``): its claims come back
at once, where a new connection to a broker just found unwell could wait
``broker_connection_timeout`` more.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

from amqp import spec
from amqp.exceptions import ChannelError, RecoverableConnectionError
from kombu.connection import Connection

from ...core.handover.publishing import Outgoing, PublishReport, Sent
from ..common.message import STABLE_ID_HEADER, UNREADABLE
from .envelope import due_content, exchange_and_routing_key
from .frames import PublishFrames

logger = logging.getLogger(__name__)

#: Longest wait for the broker's answers (a batch's confirms, an exchange's look-up);
#: beyond it the broker is taken as unwell (the movers pass half their lease, so a live
#: mover gives up before its claims expire).
CONFIRM_TIMEOUT_SECONDS = 30.0

#: Frames are written once about this many bytes are built (a socket buffer's worth).
WRITE_BYTES = 64 * 1024


class ConnectionGivenUp(ConnectionError):
    """A batch's connection was given up (after another batch's error) before its
    confirms came: they never will. Its claims come back, and the next pass sends it,
    rather than this one waiting on a new connection to a broker just found unwell."""

    def __init__(self, why: str) -> None:
        super().__init__(f"the broker connection this batch went out on was given up ({why})")


class ConfirmTimeout(ConnectionError):
    """The broker did not answer in time: a batch's confirms, or an exchange's look-up
    (the same budget, ``confirm_timeout``). The connection is given up."""


class AMQPPublisher:
    """A ``Publisher`` (core/handover/publishing.py) on a kombu connection of its own."""

    #: ``send`` writes the batch and returns; ``settle`` waits for its confirms.
    pipelines = True

    def __init__(
        self, connect: Callable[[], Connection], confirm_timeout: float = CONFIRM_TIMEOUT_SECONDS
    ) -> None:
        self.connect = connect
        self.confirm_timeout = confirm_timeout
        self._connection: Connection | None = None
        self._channel: Any = None
        self._published = 0  # delivery tags the broker gave this channel's publishes
        self._lookups: Any = None  # a channel of its own for the exchanges' look-ups
        self._exchanges: set[str] = set()  # looked up: they existed (cleared on errors)
        self._given_up_for = ""  # why the last connection was given up (_abandon)

    def send(self, messages: Sequence[Outgoing]) -> Sent:
        sent = Sent(messages)
        try:
            sent.awaiting = self._send_batch(messages, sent.report)
        except ChannelError:  # the channel was closed under it: its answers never come
            self._drop_channel()
        except Exception as exc:  # noqa: BLE001 - reported: the mover backs off and retries
            self._abandon(exc)
            sent.report.error = exc
        return sent

    def settle(self, sent: Sent) -> PublishReport:
        report = sent.report
        batch: BatchConfirms | None = sent.awaiting
        sent.awaiting = None
        if report.error is not None:
            return report
        try:
            try:
                self._confirm(batch, sent)
            except ChannelError:
                self._drop_channel()
                for message in report.unanswered(sent.messages):
                    self._publish_alone(message, report)
        except ConnectionGivenUp as exc:  # that connection is gone; a newer one stays
            report.error = exc
        except Exception as exc:  # noqa: BLE001 - reported: the mover backs off and retries
            self._abandon(exc)
            report.error = exc
        return report

    def _confirm(self, batch: BatchConfirms | None, sent: Sent) -> None:
        """Wait for a sent batch's confirms, first sending it again if its channel
        closed before it was written or confirmed (a message of an earlier batch made
        the broker close it, which drops what followed)."""
        try:
            if batch is not None and batch.connection is not self._connection:
                raise ConnectionGivenUp(self._given_up_for)
            if batch is None or batch.channel is not self._channel:
                batch = self._send_batch(sent.report.unanswered(sent.messages), sent.report)
            self._await_confirms(batch)
        finally:
            if batch is not None:
                batch.stop_listening()

    def close(self) -> None:
        """Close the connection with the broker's handshake (each of its waits bounded
        by ``confirm_timeout``: see ``_ready_channel``)."""
        self._drop_channel()
        self._lookups = None  # closed with its connection
        if self._connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._connection.release()
            self._connection = None

    def _abandon(self, error: Exception) -> None:
        """Drop the connection after ``error``, without the closing handshake: a broker
        that stopped answering would not answer it, and an answer still on its way (a
        late confirm or look-up) must not be read as a new one. The next use connects
        again; a batch sent on it and not settled yet is not sent again (``_confirm``)."""
        if self._connection is not None:
            self._given_up_for = f"{type(error).__name__}: {error}"
        self._exchanges.clear()
        self._channel = self._lookups = None  # collected with the connection
        if self._connection is not None:
            with contextlib.suppress(Exception):  # its socket may be broken already
                self._connection.collect()
            self._connection = None

    def _publish_alone(self, message: Outgoing, report: PublishReport) -> None:
        batch = None
        try:
            batch = self._send_batch([message], report)
            self._await_confirms(batch)
        except ChannelError as exc:
            self._drop_channel()
            report.refused[message.key] = f"{type(exc).__name__}: {exc}"
        finally:
            if batch is not None:
                batch.stop_listening()

    def _send_batch(self, messages: Sequence[Outgoing], report: PublishReport) -> BatchConfirms:
        """Write a batch's publishes; its answers are sorted into ``report`` from then
        on, by whichever wait reads them."""
        channel = self._ready_channel()
        connection = channel.connection  # py-amqp's, under kombu's
        if connection is None:
            raise RecoverableConnectionError("basic_publish: connection closed")
        frames = PublishFrames(channel.channel_id, connection.frame_max)
        # Written a socket buffer at a time, where py-amqp's publish writes each message
        # and reads the socket before each. (Not this package's publish either: it would
        # delay again a message whose ETA is ahead by this host's clock.) Nothing is read
        # before the last write, so the delivery tags are known in time.
        missing = self._missing_exchanges({exchange_of(m) for m in messages})
        sent: list[Outgoing] = []
        pending: list[bytes] = []
        size = 0
        for message in messages:
            why = missing.get(exchange_of(message))
            if why is not None:
                report.refused[message.key] = why
                continue
            command = encoded(frames, message, report)
            if command is None:
                continue
            sent.append(message)
            pending.append(command)
            size += len(command)
            if size >= WRITE_BYTES:
                connection.transport.write(b"".join(pending))
                pending, size = [], 0
        batch = BatchConfirms(report, self._connection, channel, self._published + 1, sent)
        self._published += len(sent)
        if pending:
            connection.transport.write(b"".join(pending))
        connection.bytes_sent += 1  # what py-amqp's heartbeat check looks at
        return batch

    def _missing_exchanges(self, exchanges: set[str]) -> dict[str, str]:
        """Look up the exchanges not seen yet (the default one always exists); the
        missing ones, each with the broker's reason. Another channel's close read
        meanwhile is raised."""
        missing: dict[str, str] = {}
        for exchange in sorted(exchanges - self._exchanges - {""}):
            try:
                self._look_up(exchange)
            except struct.error:  # a name over 255 bytes: its messages cannot be encoded
                continue
            except ChannelError as exc:
                if exc.method_sig != spec.Exchange.Declare:
                    raise  # the publishing channel's close, read while waiting
                missing[exchange] = f"{type(exc).__name__}: {exc}"
            else:
                self._exchanges.add(exchange)
        return missing

    def _look_up(self, exchange: str) -> None:
        """A passive declare of ``exchange``, on the look-ups' channel (opened first if
        need be): ``ChannelError`` when it is missing."""
        try:
            if self._lookups is None or not self._lookups.is_open:
                assert self._connection is not None
                self._lookups = self._connection.channel()
            self._lookups.exchange_declare(exchange, "direct", passive=True)
        except socket.timeout as exc:  # the connection's timeout (_ready_channel)
            raise ConfirmTimeout(
                f"the broker did not answer the look-up of exchange {exchange!r} within "
                f"{self.confirm_timeout:g} s"
            ) from exc

    def _await_confirms(self, batch: BatchConfirms) -> None:
        assert self._connection is not None
        deadline = time.monotonic() + self.confirm_timeout
        while batch.unconfirmed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ConfirmTimeout(
                    f"the broker did not confirm {batch.unconfirmed} message(s) within "
                    f"{self.confirm_timeout:g} s"
                )
            with contextlib.suppress(socket.timeout):
                self._connection.drain_events(timeout=remaining)

    def _ready_channel(self) -> Any:
        if self._connection is None:
            self._connection = self.connect()
            # py-amqp waits for the broker's answers without a limit (a channel's opening
            # or closing, an exchange's look-up), which a broker that accepted the
            # connection and then stopped answering would make endless: on this
            # connection, a read or a write gives up (socket.timeout) after
            # ``confirm_timeout`` without progress.
            self._connection.connection.transport.sock.settimeout(self.confirm_timeout)
        if self._channel is None:
            self._channel = self._connection.channel()
            self._channel.confirm_select()
            self._published = 0
        return self._channel

    def _drop_channel(self) -> None:
        self._exchanges.clear()  # a channel error: an exchange may have gone
        if self._channel is not None:
            with contextlib.suppress(Exception):  # the broker may have closed it already
                self._channel.close()
            self._channel = None


def exchange_of(message: Outgoing) -> str:
    return exchange_and_routing_key(message.destination)[0]


def publish_command(frames: PublishFrames, message: Outgoing) -> bytes:
    """The frames of one due message's mandatory publish."""
    exchange, routing_key = exchange_and_routing_key(message.destination)
    body, properties = due_content(message.payload, message.stable_id)
    return frames.publish(exchange, routing_key, body, properties)


def encoded(frames: PublishFrames, message: Outgoing, report: PublishReport) -> bytes | None:
    """The frames of one due message's publish, or None when it cannot be encoded (it is
    then refused in ``report``: it alone, never its batch)."""
    try:
        return publish_command(frames, message)
    except UNREADABLE as exc:
        report.refuse_unreadable(message, exc)
    except Exception as exc:  # noqa: BLE001 - encoding does no I/O: the message is at fault
        report.refuse_unencodable(message, exc)
    return None


def check_publishable(destination: str, payload: bytes, frame_max: int) -> None:
    """Encode a delayed message now as its hand-over will when it is due
    (``publish_command``), so that what py-amqp cannot encode (a header of a type it
    does not know: ``FrameSyntaxError``) fails this publish, as py-amqp fails a publish
    made at once, instead of failing every hand-over of it; so do headers too large
    for one frame of ``frame_max`` bytes (``FrameError``)."""
    publish_command(PublishFrames(1, frame_max), Outgoing(b"", destination, payload, 0))


class BatchConfirms:
    """The broker's answers to one batch, sorted into its report as they arrive.

    A batch's delivery tags are consecutive (``first`` on), and the broker confirms
    them in order, most with ``multiple``: settling walks each tag once.
    """

    def __init__(
        self,
        report: PublishReport,
        connection: Connection | None,
        channel: Any,
        first: int,
        messages: Sequence[Outgoing],
    ) -> None:
        """``messages`` went out on ``channel`` of the publisher's ``connection`` with
        the delivery tags ``first``, ``first + 1``...; it is listened to until
        ``stop_listening``."""
        self.report = report
        self.connection = connection
        self.channel = channel
        self.unconfirmed = len(messages)
        self._first = first
        self._keys: list[bytes | None] = [m.key for m in messages]  # None: settled
        self._lowest = 0  # below this index every message is settled
        self._messages = messages
        self._by_id: dict[str, bytes] | None = None  # made on the first return (rare)
        self._returned: dict[bytes, str] = {}
        self._handlers = {
            "basic_return": self.on_return,
            "basic_ack": self.on_ack,
            "basic_nack": self.on_nack,
        }
        for event, handler in self._handlers.items():
            channel.events[event].add(handler)

    def stop_listening(self) -> None:
        for event, handler in self._handlers.items():
            self.channel.events[event].discard(handler)

    def on_return(self, exc: Exception, exchange: str, routing_key: str, message: Any) -> None:
        """``basic.return``: unroutable; it comes before the message's ``basic.ack``."""
        if self._by_id is None:
            self._by_id = {outgoing.stable_id: outgoing.key for outgoing in self._messages}
        headers = message.properties.get("application_headers") or {}
        key = self._by_id.get(str(headers.get(STABLE_ID_HEADER)))
        if key is not None:
            self._returned[key] = (
                f"unroutable: {exc} (exchange {exchange!r}, routing key {routing_key!r})"
            )

    def on_ack(self, delivery_tag: int, multiple: bool) -> None:
        returned = self._returned
        for key in self._settled(delivery_tag, multiple):
            if key in returned:
                self.report.refused[key] = returned[key]
            else:
                self.report.confirmed.append(key)

    def on_nack(self, delivery_tag: int, multiple: bool) -> None:
        for key in self._settled(delivery_tag, multiple):
            self.report.refused[key] = "nacked: the broker could not take the message"

    def _settled(self, delivery_tag: int, multiple: bool) -> list[bytes]:
        """The keys this answer settles, each once (a tag not of this batch: none)."""
        keys = self._keys
        position = delivery_tag - self._first
        if position < 0 or (position >= len(keys) and not multiple):
            return []
        end = min(position + 1, len(keys))
        start = self._lowest if multiple else position
        settled = [key for key in keys[start:end] if key is not None]
        keys[start:end] = [None] * max(0, end - start)
        if multiple:
            self._lowest = max(start, end)
        self.unconfirmed -= len(settled)
        return settled
