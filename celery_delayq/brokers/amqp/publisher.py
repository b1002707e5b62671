"""Publishes due messages to an AMQP broker with batched publisher confirms.

py-amqp's own confirm mode waits for each message's confirm before the next publish,
a round trip per message. Here a whole batch is published (``mandatory``, so an
unroutable message comes back instead of vanishing), then the confirms are collected:
RabbitMQ sends ``basic.return`` for an unroutable message before its ``basic.ack``,
and ``basic.nack`` for one it could not take. A channel error (an exchange that does
not exist, a message above ``max_message_size``) closes the channel and says nothing
of which message caused it, so the messages not yet confirmed are then published one
by one, to refuse only the one that fails.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from amqp.exceptions import ChannelError, RecoverableConnectionError
from kombu.connection import Connection

from ...core.handover import Outgoing, PublishReport
from ..common.message import STABLE_ID_HEADER
from .envelope import due_content, exchange_and_routing_key
from .frames import PublishFrames

logger = logging.getLogger(__name__)

#: Longest wait for the confirms of one batch; beyond it the broker is taken as unwell
#: (the movers pass half their lease, so a live mover gives up before its claims expire).
CONFIRM_TIMEOUT_SECONDS = 30.0


class ConfirmTimeout(ConnectionError):
    """The broker did not confirm a batch in time."""


class AMQPPublisher:
    """A ``Publisher`` (core/handover.py) on a kombu connection of its own."""

    def __init__(
        self, connect: Callable[[], Connection], confirm_timeout: float = CONFIRM_TIMEOUT_SECONDS
    ) -> None:
        self.connect = connect
        self.confirm_timeout = confirm_timeout
        self._connection: Connection | None = None
        self._channel: Any = None
        self._published = 0  # delivery tags the broker gave this channel's publishes

    def publish(self, messages: Sequence[Outgoing]) -> PublishReport:
        report = PublishReport()
        try:
            self._publish_batch(messages, report)
        except ChannelError:
            self._drop_channel()
            settled = {*report.confirmed, *report.refused}
            for message in messages:
                if message.key not in settled:
                    self._publish_alone(message, report)
        except Exception as exc:  # noqa: BLE001 - reported: the mover backs off and retries
            self.close()
            report.error = exc
        return report

    def close(self) -> None:
        self._drop_channel()
        if self._connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._connection.release()
            self._connection = None

    def _publish_alone(self, message: Outgoing, report: PublishReport) -> None:
        try:
            self._publish_batch([message], report)
        except ChannelError as exc:
            self._drop_channel()
            report.refused[message.key] = f"{type(exc).__name__}: {exc}"

    def _publish_batch(self, messages: Sequence[Outgoing], report: PublishReport) -> None:
        channel = self._ready_channel()
        batch = BatchConfirms(report)
        handlers = {
            "basic_return": batch.on_return,
            "basic_ack": batch.on_ack,
            "basic_nack": batch.on_nack,
        }
        # Listen before publishing, so that no answer to this batch is read unheard.
        for event, handler in handlers.items():
            channel.events[event].add(handler)
        try:
            connection = channel.connection  # py-amqp's, under kombu's
            if connection is None:
                raise RecoverableConnectionError("basic_publish: connection closed")
            frames = PublishFrames(channel.channel_id, connection.frame_max)
            commands = []
            for message in messages:
                exchange, routing_key = exchange_and_routing_key(message.destination)
                body, properties = due_content(message.payload, message.stable_id)
                commands.append(frames.publish(exchange, routing_key, body, properties))
            first = self._published + 1
            self._published += len(messages)
            batch.expect(first, messages)
            # The whole batch in one write, where py-amqp's publish writes each message
            # and reads the socket before each. (Not this package's publish either: it
            # would delay again a message whose ETA is ahead by this host's clock.)
            connection.transport.write(b"".join(commands))
            connection.bytes_sent += 1  # what py-amqp's heartbeat check looks at
            self._await_confirms(batch)
        finally:
            for event, handler in handlers.items():
                channel.events[event].discard(handler)

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
        if self._channel is None:
            self._channel = self._connection.channel()
            self._channel.confirm_select()
            self._published = 0
        return self._channel

    def _drop_channel(self) -> None:
        if self._channel is not None:
            with contextlib.suppress(Exception):  # the broker may have closed it already
                self._channel.close()
            self._channel = None


class BatchConfirms:
    """The broker's answers to one batch, sorted into its report as they arrive.

    A batch's delivery tags are consecutive (``first`` on), and the broker confirms
    them in order, most with ``multiple``: settling walks each tag once.
    """

    def __init__(self, report: PublishReport) -> None:
        self.report = report
        self.unconfirmed = 0
        self._first = 0
        self._keys: list[bytes | None] = []  # by delivery tag - first; None: settled
        self._lowest = 0  # below this index every message is settled
        self._messages: Sequence[Outgoing] = ()
        self._by_id: dict[str, bytes] | None = None  # made on the first return (rare)
        self._returned: dict[bytes, str] = {}

    def expect(self, first: int, messages: Sequence[Outgoing]) -> None:
        """``messages`` go out with the delivery tags ``first``, ``first + 1``..."""
        self._first = first
        self._keys = [message.key for message in messages]
        self.unconfirmed = len(messages)
        self._messages = messages

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
