"""What every Redis channel of ours needs, consuming or not: its poller, the class of
the messages kombu delivers, and the event type of the landing waits. The atomic consumer
itself (consume.py, landing.py) is imported when a channel first consumes, so a process
that only publishes never loads it.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

#: The poller's event type of a landing wait (landing.py), followed by its kombu list.
WAIT_TYPE = "BLMOVE "


class UnreadableMessage(Exception):
    """kombu cannot turn a message taken off a queue into a message (the reason)."""


class CheckedMessage(virtual.Message):
    """kombu's message, whose construction failing (no delivery tag, a body that does not
    decode...) is told apart from errors of the consumer that receives it."""

    def __init__(self, payload: Any, channel: Any = None, **kwargs: Any) -> None:
        try:
            super().__init__(payload, channel=channel, **kwargs)
        except Exception as exc:  # anything a hostile envelope makes kombu raise
            raise UnreadableMessage(f"kombu cannot read it: {exc!r}"[:300]) from exc


class ConsumingPoller(kombu_redis.MultiChannelPoller):
    """kombu's poller, which also renews every channel's leases before each restore
    (restore.py), reads the landing waits (even when the channel has no room: a landed
    message is then given back, not left in the socket) and drops a wait whose connection
    went silent."""

    def maybe_restore_messages(self) -> Any:
        for channel in list(self._channels):
            renew = getattr(channel.qos, "renew_leases", None)
            if renew is None:
                continue
            with suppress(channel.connection_errors):  # the next round renews again
                renew()
        return super().maybe_restore_messages()

    def on_readable(self, fileno: int) -> Any:
        chan_type = self._fd_to_chan.get(fileno)
        if chan_type is not None and chan_type[1].startswith(WAIT_TYPE):
            channel, event_type = chan_type
            return channel.handlers[event_type]()
        return super().on_readable(fileno)

    def maybe_check_brpop_health(self) -> Any:
        for channel in list(self._channels):
            consumer = getattr(channel, "consumer", None)
            if consumer is None or not channel.health_check_interval:
                continue
            for wait in consumer.waits.overdue(channel.health_check_interval):
                sock = wait.client.connection._sock
                if sock is None or not kombu_redis._socket_readable(sock):
                    wait.unsure = True
                    wait.waiting = False
                    wait.client.connection.disconnect()
        return super().maybe_check_brpop_health()
