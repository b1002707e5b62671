"""Unacknowledged messages on the Redis broker: leases renewed while their worker lives,
and restored without kombu's mutex once it is gone.

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

Every restored message goes back to a queue or to the dead letters, never nowhere: an
entry consume.lua wrote names the queue the message was taken from, and one that names
an exchange routing it to no queue (written by a stock kombu worker, whose entries name
the exchange, after the exchange lost its bindings) becomes a dead letter, with the reason.

Leases: kombu's ``unacked_index`` scores each message with the time it was delivered,
and every restore (ours and stock kombu's) takes those older than ``visibility_timeout``,
so an acks_late task that runs longer than that runs again on another worker while the
first still runs it. A live worker here renews the score of every message it holds,
prefetched or running, each time its transport looks for messages to restore (every
``unacked_restore_interval``, 10 s by default, from the worker's event loop): one ZADD XX
for all of them. A worker that dies stops renewing, and its messages come back
``visibility_timeout`` later, which therefore only needs to exceed that interval by a
margin, not the longest task (the docs recommend 60 s). A solo pool runs tasks in the
event loop's own thread, so it renews only between tasks.

How often: kombu scans for expired messages on every ``unacked_restore_throttle``-th
call only (10 by default), and calls come every ``unacked_restore_interval`` (10 s) from
a worker's event loop, so a scan happens every 100 s or so: a dead worker's messages
came back up to ``visibility_timeout`` + 100 s after it died. The throttle protects
kombu's synchronous poll path, which calls on every empty poll (each second). Here a
clock replaces it: a channel scans when ``unacked_restore_interval`` has passed since its
last scan, so within ``visibility_timeout`` + ``unacked_restore_interval`` on either path.

Stock kombu workers and ours may share queues: theirs take the lock, ours do not, and
the per-message transaction keeps each restore single.
"""

from __future__ import annotations

import logging
from time import monotonic, time
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import dumps, loads

from ..common.message import Delivered, file_dead_letter

logger = logging.getLogger(__name__)

REDELIVERIES_HEADER = "delayq_redeliveries"
#: kombu key (global_keyprefix applies) of the hash counting redeliveries per queue.
REDELIVERED_KEY = "_delayq.redelivered"


class LockFreeQoS(kombu_redis.QoS):
    """kombu's Redis QoS with ``restore_visible`` freed from ``unacked_mutex``, which also
    returns what dead consumers left in their landing lists (consume.py)."""

    #: When this channel last scanned for expired messages (monotonic seconds).
    _last_scan = float("-inf")

    def append(self, message: Any, delivery_tag: str) -> None:
        """kombu's record of a delivered message, unless consume.lua already wrote it."""
        recorded = self.channel.consumer.recorded_tags
        if delivery_tag in recorded:
            recorded.discard(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)
            return
        super().append(message, delivery_tag)

    def restore_visible(self, start: int = 0, num: int = 10, interval: int = 10) -> None:
        if not self.channel.diverter.config.reliable_consume:
            return super().restore_visible(start, num, interval)
        now = monotonic()
        if now - self._last_scan < self.scan_interval() * 0.9:  # a timer may fire early
            return None
        self._last_scan = now
        with self.channel.conn_or_acquire() as client:
            ceil = time() - self.visibility_timeout
            # the most recently expired first, as kombu does: each goes to the end its
            # queue is consumed from, so the longest waiting runs first
            visible = _newest_first(client, self.unacked_index_key, ceil, num and start, num)
            for tag, _ in visible or []:
                try:
                    self.restore_expired(tag, ceil, client)
                except self.channel.connection_errors:
                    raise
                except Exception as exc:  # its dead letter could not be written: next scan
                    logger.warning("Could not restore message %r yet: %r", tag, exc)
        if self.channel.consumer.on:
            self.channel.consumer.waits.return_landed()
        return None

    def scan_interval(self) -> float:
        """kombu's ``unacked_restore_interval`` (a transport option kombu reads itself from
        5.6 on; before, the worker looks every 10 s)."""
        interval = getattr(self.channel, "unacked_restore_interval", None)
        if interval is None:
            options = self.channel.connection.client.transport_options
            interval = options.get("unacked_restore_interval", 10)
        return float(interval or 0)

    def restore_expired(self, tag: str, ceil: float, client: Any) -> None:
        """Put one message back, in one transaction, if it is still unacknowledged and
        still expired (scored up to ``ceil``). Without kombu's lock, another worker may
        have restored it since it was listed, and a consumer taken it again (the same
        delivery tag, scored anew) or its holder renewed it: restoring it then would run
        it twice."""
        index = self.unacked_index_key
        if "ZSCORE" not in kombu_redis.PrefixedStrictRedis.PREFIXED_SIMPLE_COMMANDS:
            index = self.channel.global_keyprefix + index  # the pipeline leaves it as is

        def restore(pipe: Any) -> None:
            score = pipe.zscore(index, tag)
            entry = pipe.hget(self.unacked_key, tag)
            pipe.multi()
            if score is not None and score > ceil:
                return  # held again since it was listed
            self._remove_from_indices(tag, pipe)
            if entry:
                message, exchange, routing_key = loads(bytes_to_str(entry))
                self.channel._do_restore_message(message, exchange, routing_key, pipe)

        client.transaction(restore, self.unacked_key, self.unacked_index_key)

    def renew_leases(self) -> int:
        """Mark every message this channel holds and has not acknowledged as delivered
        now (``XX``: an entry acknowledged meanwhile is not written back); how many."""
        if not self.channel.diverter.config.reliable_consume:
            return 0
        if self.channel.consumer.waits.by_list:
            self.channel.consumer.waits.renew_lease()
        try:
            held = [tag for tag in tuple(self._delivered) if tag not in self._dirty]
        except RuntimeError:  # changed by a pool thread while read: renew next round
            return 0
        if not held:
            return 0
        with self.channel.conn_or_acquire() as client:
            client.zadd(self.unacked_index_key, dict.fromkeys(held, time()), xx=True)
        return len(held)


def _newest_first(client: Any, key: str, ceil: float, start: int, num: int) -> Any:
    """Entries of ``key`` scored up to ``ceil``, highest first, in the command that this
    kombu's client prefixes with ``global_keyprefix`` (kombu 5.7 ``ZRANGE ... BYSCORE
    REV``, earlier ``ZREVRANGEBYSCORE``): an unprefixed key would be another key, or one a
    prefix-confined ACL user may not read."""
    if "ZRANGE" in kombu_redis.PrefixedStrictRedis.PREFIXED_SIMPLE_COMMANDS:
        return client.zrange(
            key, ceil, 0, desc=True, byscore=True, offset=start, num=num, withscores=True
        )
    return client.zrevrangebyscore(key, ceil, 0, start=start, num=num, withscores=True)


def routed_queues(channel: Any, exchange: Any, routing_key: Any) -> list[str]:
    """The queues a restore puts a message back in: kombu's lookup of its exchange and
    routing key ([] when they route it nowhere, or cannot be looked up)."""
    try:
        return list(channel._lookup(exchange, routing_key))
    except Exception:  # a hostile exchange name, or a binding kombu cannot read
        return []


def dead_letter_unroutable(
    channel: Any, payload: dict[str, Any], exchange: Any, routing_key: Any
) -> None:
    """Keep a message being restored whose exchange routes it to no queue as a dead letter
    (of the queue its routing key names), before the restore removes its entry: an entry
    written by consume.lua names the queue it was taken from, but one written by stock
    kombu, or before consume.lua did, names the exchange, whose bindings may be gone."""
    queue = str(routing_key or exchange or "")
    reason = f"restored, but exchange {exchange!r} routes {routing_key!r} to no queue"[:300]
    delivered = Delivered(queue, channel.real_key(queue), dumps(payload).encode())
    file_dead_letter(channel.diverter.store, delivered, reason)
    logger.warning(
        "A message of queue %r went to the dead letters (`celery delayq dead`): %s",
        queue,
        reason,
    )


def count_redelivery(payload: dict[str, Any]) -> None:
    """Add one to the message's ``delayq_redeliveries`` header."""
    headers = payload.get("headers")
    if isinstance(headers, dict):
        try:
            seen = int(headers.get(REDELIVERIES_HEADER) or 0)
        except (TypeError, ValueError, OverflowError):  # a hostile count: start over
            seen = 0
        headers[REDELIVERIES_HEADER] = seen + 1
