"""Publishes due messages to a Redis broker whose store is elsewhere (``delayq_store_url``).

One script call (``lua/push_lists.lua``) per batch on the broker pushes every message
onto its kombu list, so the batch is confirmed as a whole when the call returns; a
destination key that is not a list refuses its own messages and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import redis
from kombu.connection import Connection

from ...core.handover.publishing import ConfirmedOnReturn, Outgoing, PublishReport
from ...core.lua import script_source
from ..common.message import STABLE_ID_HEADER, UNREADABLE, with_header


class RedisListPublisher(ConfirmedOnReturn):
    """A ``Publisher`` (core/handover/publishing.py) on a kombu Redis connection of its own."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self.connect = connect
        self._connection: Connection | None = None
        self._push: Any = None

    def publish_now(self, messages: Sequence[Outgoing]) -> PublishReport:
        report = PublishReport()
        by_destination: dict[str, list[tuple[Outgoing, bytes]]] = {}
        for message in messages:
            try:
                payload = with_header(message.payload, STABLE_ID_HEADER, message.stable_id)
            except UNREADABLE as exc:
                report.refuse_unreadable(message, exc)
                continue
            by_destination.setdefault(message.destination, []).append((message, payload))
        if not by_destination:
            return report
        destinations = list(by_destination)
        groups = [[m for m, _ in by_destination[d]] for d in destinations]
        payloads = [payload for d in destinations for _, payload in by_destination[d]]
        expiries = [max((m.expires_ms or 0) for m in group) for group in groups]
        try:
            refused = self._script()(
                keys=destinations, args=[*map(len, groups), *payloads, *expiries]
            )
        except Exception as exc:  # noqa: BLE001 - reported: the mover backs off and retries
            self.close()
            report.error = exc
            return report
        refused_kinds = {int(i): kind.decode() for i, kind in zip(refused[::2], refused[1::2])}
        for index, group in enumerate(groups, start=1):
            kind = refused_kinds.get(index)
            if kind is None:
                report.confirmed.extend(message.key for message in group)
                continue
            reason = f"cannot deliver to {group[0].destination}: it holds a {kind}, not a list"
            report.refused.update((message.key, reason) for message in group)
        return report

    def _script(self) -> Any:
        if self._push is None:
            self._connection = self.connect()
            channel: Any = self._connection.default_channel  # a Redis channel: it has a pool
            pool = channel.pool
            self._push = redis.Redis(connection_pool=pool).register_script(
                script_source(__name__.rpartition(".")[0], "push_lists")
            )
        return self._push

    def close(self) -> None:
        self._push = None
        if self._connection is not None:
            with contextlib.suppress(Exception):  # closing a broken connection
                self._connection.release()
            self._connection = None
