"""Restoring unacknowledged messages on the Redis broker without kombu's mutex.

kombu's Redis transport keeps each delivered, unacknowledged message in its ``unacked``
hash and, every ``unacked_restore_interval``, a worker puts back the ones older than
``visibility_timeout``. It does so only while it holds the ``unacked_mutex`` lock: a
worker killed while holding it stops every restore, by every worker, for
``unacked_mutex_expire`` (300 s by default). The lock is not needed for correctness:
each message is restored in its own WATCH transaction on the ``unacked`` hash
(``QoS.restore_by_tag``), so of two workers restoring the same message, one puts it back
and the other finds it gone. ``LockFreeQoS`` restores the same messages, in the same
order and by the same transaction, without the lock.

Each restored message also counts its redeliveries in the ``delayq_redeliveries``
header (kombu already sets ``redelivered`` in its headers and delivery info).

Stock kombu workers and ours may share queues: theirs take the lock, ours do not, and
the per-message transaction keeps each restore single.
"""

from __future__ import annotations

from time import time
from typing import Any

from kombu.transport import redis as kombu_redis

REDELIVERIES_HEADER = "delayq_redeliveries"


class LockFreeQoS(kombu_redis.QoS):  # type: ignore[misc]
    """kombu's Redis QoS with ``restore_visible`` freed from ``unacked_mutex``."""

    def restore_visible(self, start: int = 0, num: int = 10, interval: int = 10) -> None:
        if not self.channel.delayq_config.reliable_consume:
            return super().restore_visible(start, num, interval)  # type: ignore[no-any-return]
        self._vrestore_count += 1
        if (self._vrestore_count - 1) % (interval or 1):  # kombu's throttle, kept
            return None
        with self.channel.conn_or_acquire() as client:
            ceil = time() - self.visibility_timeout
            # the most recently expired first, as kombu does: each goes to the end its
            # queue is consumed from, so the longest waiting runs first
            visible = client.zrevrangebyscore(
                self.unacked_index_key, ceil, 0, start=num and start, num=num, withscores=True
            )
            for tag, _ in visible or []:
                self.restore_by_tag(tag, client)
        return None


def count_redelivery(payload: dict[str, Any]) -> None:
    """Add one to the message's ``delayq_redeliveries`` header."""
    headers = payload.get("headers")
    if isinstance(headers, dict):
        try:
            seen = int(headers.get(REDELIVERIES_HEADER) or 0)
        except (TypeError, ValueError):
            seen = 0
        headers[REDELIVERIES_HEADER] = seen + 1
