"""Publishes due messages through a kombu virtual transport's own put (SQS, ...).

kombu's virtual ``_put`` returns once the broker took the message (SQS's SendMessage
is synchronous), so each message is confirmed when its put returns. A connection
error stops the batch (the rest is given back); any other error refuses that message
alone (an SQS message over 256 KiB, say), and the batch goes on, as does an error the
channel names among its ``refusals`` although kombu lists it among the connection
errors (botocore's check of one message's arguments, on SQS).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from kombu.connection import Connection
from kombu.utils.json import loads

from ...core.handover.publishing import ConfirmedOnReturn, Outgoing, PublishReport
from .message import STABLE_ID_HEADER, UNREADABLE, with_header


class VirtualPublisher(ConfirmedOnReturn):
    """A ``Publisher`` (core/handover/publishing.py) on a kombu connection of its own."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self.connect = connect
        self._connection: Connection | None = None

    def publish_now(self, messages: Sequence[Outgoing]) -> PublishReport:
        report = PublishReport()
        try:
            connection = self._connection or self.connect()
            self._connection = connection
            channel: Any = connection.default_channel
        except Exception as exc:  # noqa: BLE001 - reported: the mover backs off and retries
            self.close()
            report.error = exc
            return report
        refusals: tuple[type[Exception], ...] = getattr(channel, "refusals", ())
        for message in messages:
            try:
                envelope = loads(with_header(message.payload, STABLE_ID_HEADER, message.stable_id))
            except UNREADABLE as exc:
                report.refuse_unreadable(message, exc)
                continue
            try:
                channel.put_now(message.destination, envelope)
            except Exception as exc:  # noqa: BLE001 - sorted: a lost connection, or a refusal
                if isinstance(exc, connection.connection_errors) and not isinstance(exc, refusals):
                    self.close()
                    report.error = exc
                    return report
                report.refused[message.key] = f"{type(exc).__name__}: {exc}"
            else:
                report.confirmed.append(message.key)
        return report

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._connection.release()
            self._connection = None
