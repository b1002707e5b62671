"""Atomic consume on the Redis broker: a message leaves its queue list only to become an
in-flight record, in one Redis step, so a worker killed at any moment loses nothing.

kombu's Redis transport takes a message with BRPOP and records it in its ``unacked`` hash
in a second round trip; a worker killed in between (or one whose BRPOP reply sits unread
in its socket) loses the message for good. Here:

- ``consume.lua`` takes the next message of the first non-empty list, in kombu's order
  (queue rotation, then priority), and writes kombu's own ``unacked`` entry in the same
  call. It does not block, so it is sent the way kombu sends BRPOP, and read when the
  reply arrives. Of a message bigger than 16 KiB it decodes the ``properties`` only, never
  the body, so a big message costs Redis what copying it costs; a big one whose envelope
  it cannot skim within its budget is recorded under a provisional tag of the call, and
  the consumer reads it and renames the entry to its delivery tag (``name.lua``,
  ``AtomicConsumer.named``).
- When every list was empty, the channel waits (landing.py) with one ``BLMOVE`` per list (queue x
  priority step), each on a connection of its own, moving a message into a landing list
  of this consumer's; BLMOVE is atomic, but takes one source list, and a Lua script cannot
  block. The landed message is then taken from the landing list by ``consume.lua`` (and
  so recorded), or, when the channel has no room for it (prefetch), moved straight back
  to the head of its queue.
- While its consumer lives, a landing list is covered by the consumer's lease (a key
  with ``visibility_timeout`` to live, renewed with the leases of the messages it holds,
  restore.py); once the lease is gone, any worker's restore puts its messages back
  at the head of their queues (``return_landed.lua``).

- A message the worker cannot read (not kombu's JSON envelope, or one kombu cannot turn
  into a message) never stops the worker and is never dropped: ``consume.lua`` hands an
  unreadable message back to its list and says why, and the consumer moves it to the dead
  letters of its queue (core/store/dead_letters.py: ``celery delayq dead``) with the reason,
  logged at WARNING. A message kombu can deliver is delivered, as on kombu's own path.

Everything else is kombu's: the same lists, order and prefetch, ``basic_get``, the
``unacked`` hash and its restores (which stock kombu workers run on our entries too),
acks, rejects and requeues. ``delayq_reliable_consume = False`` gives kombu's BRPOP path.
"""

from __future__ import annotations

import logging
from functools import cached_property, partial
from time import monotonic, time
from typing import Any
from uuid import uuid4

import redis
from kombu.transport import virtual
from kombu.utils.json import dumps
from redis.exceptions import NoScriptError, ResponseError

from ..common.message import Delivered, count_of, file_dead_letter
from .landing import LandingWait, LandingWaits
from .polling import UnreadableMessage
from .replies import SOURCES, ConsumeScripts, Delivering, Taken, checked_tag, read_payload
from .restore import REDELIVERIES_HEADER

logger = logging.getLogger(__name__)


class AtomicConsumer:
    """The atomic consume path of one Redis channel (see the module), which the channel
    hands kombu's BRPOP start and read, ``basic_get`` and its landing waits.

    ``channel`` is a kombu Redis channel of ours (brokers/redis/channel.py): kombu's
    lists, poller and QoS are its own; the consumer keeps only its waits and scripts.
    """

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.waits = LandingWaits(self)
        #: Queues consumed with no_ack: what is taken from them is not recorded.
        self.noack_queues: set[str] = set()
        #: Delivery tags that consume.lua recorded: QoS.append must not write them again.
        self.recorded_tags: set[str] = set()
        #: Whether the last look at every list found them empty, so the channel now waits.
        self.consume_waits = False
        #: The lists of the consume.lua call in flight: (kombu list, queue) each.
        self._consume_sent: list[tuple[str, str]] = []
        #: The provisional tag of the consume.lua call in flight (consume_call).
        self._provisional = ""
        #: When the last warning of a call Redis refused was logged (monotonic seconds).
        self._refused_warned_at = float("-inf")
        #: The message being handed to kombu's consumer callback, while it is.
        self.delivering: Delivering | None = None

    @property
    def on(self) -> bool:
        """Whether the channel consumes atomically (kombu's ack emulation is on, and
        ``delayq_reliable_consume`` is not turned off)."""
        channel = self.channel
        return bool(channel.ack_emulation and channel.diverter.config.reliable_consume)

    @property
    def wait_timeout(self) -> float:
        """Seconds a BLMOVE waits: kombu's BRPOP timeout (1 s before kombu 5.6 named it)."""
        return float(getattr(self.channel, "brpop_timeout", 1))

    @cached_property
    def plain_client(self) -> redis.Redis:
        """An unprefixed client on kombu's pool: script keys are prefixed here."""
        return redis.Redis(connection_pool=self.channel.pool)

    @cached_property
    def scripts(self) -> ConsumeScripts:
        return ConsumeScripts.register(self.plain_client)

    def consume_lists(self, queues: list[str]) -> list[tuple[str, str]]:
        """(kombu list, queue) in the order kombu's BRPOP names them."""
        channel = self.channel
        lists = [
            (channel._q_for_pri(queue, pri), queue)
            for pri in channel.priority_steps
            for queue in queues
        ]
        return list(dict.fromkeys(lists))

    def unacked_keys(self) -> list[str]:
        """KEYS[1] and KEYS[2] of the consume scripts: kombu's unacked hash and index."""
        channel = self.channel
        return [channel.real_key(channel.unacked_key), channel.real_key(channel.unacked_index_key)]

    def consume_call(self, lists: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
        """KEYS and ARGV of consume.lua taking from these lists, with a provisional tag
        of its own (ARGV[2]: see ``named``)."""
        real_key = self.channel.real_key
        keys = self.unacked_keys() + [real_key(kombu_list) for kombu_list, _ in lists]
        record_as = ["" if queue in self.noack_queues else queue for _, queue in lists]
        return keys, [repr(time()), f"_delayq.unread.{uuid4().hex}", *record_as]

    def named(
        self, taken: Taken, provisional: str, queue: str, source: str, taken_from: str
    ) -> Taken | None:
        """``taken``, or, when consume.lua recorded it under the call's ``provisional``
        tag (a big message its skim could not follow), ``taken`` under the delivery tag
        read here, its entry renamed to it (name.lua). None when it went to the dead
        letters instead (its entry dropped), or a restore put it back in its queue."""
        if taken.reason or not taken.tag or taken.tag != provisional:
            return taken
        try:
            tag = checked_tag(taken.message)
        except UnreadableMessage as exc:
            self.dead_letter(queue, source, taken_from, taken, str(exc))
            return None
        if not self.scripts.name(self.unacked_keys(), [provisional, tag, repr(time())]):
            return None
        return Taken(taken.message, tag, "")

    # -- consuming from the event loop: kombu's BRPOP start and read, replaced --

    def start(self, timeout: float | None = None) -> None:
        """Send consume.lua the way kombu sends BRPOP (or wait, when all were empty)."""
        channel = self.channel
        queues = channel._queue_cycle.consume(len(channel.active_queues))
        if not queues:
            return
        lists = self.consume_lists(queues)
        if self.consume_waits:
            self.waits.wait_on(lists, self.wait_timeout if timeout is None else timeout)
            return
        keys, args = self.consume_call(lists)
        connection = channel.client.connection
        self._consume_sent, self._provisional = lists, args[1]
        channel._in_poll = connection
        channel._brpop_sent_at = monotonic()
        sha = self.scripts.consume.sha
        connection.send_command("EVALSHA", sha, len(keys), *keys, *args)

    def read(self) -> bool:
        """Read consume.lua's reply and deliver what it took."""
        channel = self.channel
        connection = channel.client.connection
        try:
            try:
                reply = connection.read_response()
            except NoScriptError:  # a restarted Redis: load it, and look again
                self.plain_client.script_load(SOURCES["consume"])
                raise virtual.Empty() from None
            except channel.connection_errors:
                connection.disconnect()
                raise
            except ResponseError as exc:  # Redis refused the call: wait (BLMOVE), look again
                self.warn_refused(exc)
                self.consume_waits = True
                raise virtual.Empty() from None
            if reply is None:
                self.consume_waits = True
                raise virtual.Empty()
            kombu_list, queue = self._consume_sent[reply[0] - 1]
            source = channel.real_key(kombu_list)
            taken = self.named(Taken.of(reply), self._provisional, queue, source, source)
            if taken is None or not self.deliver_taken(queue, source, source, taken):
                raise virtual.Empty()
            return True
        finally:
            channel._in_poll = None
            flush_reauth = getattr(channel, "_flush_brpop_reauth", None)  # kombu >= 5.7
            if flush_reauth is not None:
                flush_reauth()

    def warn_refused(self, exc: ResponseError) -> None:
        """Log, at most once a minute, that Redis refused a consume call or a wait (a queue
        key that is not a list, say): the consumer goes on with the other lists."""
        if monotonic() - self._refused_warned_at >= 60:
            self._refused_warned_at = monotonic()
            logger.warning(
                "Redis refused to hand over messages (retried; other lists go on): %s", exc
            )

    def deliver_taken(self, queue: str, source: str, taken_from: str, taken: Taken) -> bool:
        """Hand a message consume.lua took to kombu's consumer callback, as BRPOP's reply;
        False when it went to the dead letters instead. ``source`` is the Redis key of
        its queue list, ``taken_from`` the list it was read from (source, or a landing)."""
        self.channel._queue_cycle.rotate(queue)
        try:
            if taken.reason:  # not taken: still the last element of its list
                raise UnreadableMessage(taken.reason)
            payload = read_payload(taken.message, taken.tag)
            if taken.tag:
                self.recorded_tags.add(taken.tag)
            tag = payload["properties"].get("delivery_tag")
            self.delivering = Delivering(tag, Delivered(queue, source, taken.message))
            try:
                self.channel.connection._deliver(payload, queue)
            finally:
                self.delivering = None
        except UnreadableMessage as exc:
            self.dead_letter(queue, source, taken_from, taken, str(exc))
            return False
        return True

    def delivered(self, message: Any) -> Delivered:
        """Where ``message``, delivered by this channel, came from (worker/poison.py):
        the queue and list it was taken from, as taken; one that kombu's own path
        delivered, by its routing key."""
        now = self.delivering
        if now is not None and now.tag == message.delivery_tag:
            return now.delivered
        queue = str((message.delivery_info or {}).get("routing_key") or "")
        return Delivered(queue, self.channel.real_key(queue), dumps(message._raw).encode())

    @staticmethod
    def delivery_count(message: Any) -> int:
        """How many times ``message`` has been delivered, this time included: one more
        than the restores counted in its ``delayq_redeliveries`` header (restore.py)."""
        return 1 + count_of((message.headers or {}).get(REDELIVERIES_HEADER))

    def dead_letter(
        self, queue: str, source: str, taken_from: str, taken: Taken, reason: str
    ) -> None:
        """Move a message this consumer cannot read to the dead letters of its queue,
        with the reason (core/store/dead_letters.py); resent, it goes back to ``source``.

        The dead letter is written first, then the message leaves the list it is still in
        (only if it is still its last element) or its unacked entry: a consumer killed in
        between leaves a second copy, never none."""
        delivered = Delivered(queue, source, taken.message)
        file_dead_letter(self.channel.diverter.store, delivered, reason)
        if taken.reason:
            self.plain_client.transaction(
                partial(_pop_if_last, taken_from, taken.message), taken_from
            )
        elif taken.tag:
            self.recorded_tags.discard(taken.tag)
            entries, index = self.unacked_keys()
            with self.plain_client.pipeline() as pipe:
                pipe.zrem(index, taken.tag)
                pipe.hdel(entries, taken.tag)
                pipe.execute()
        logger.warning(
            "A message of queue %r cannot be read and went to the dead letters "
            "(`celery delayq dead`): %s",
            queue,
            reason,
        )

    def take_landed(self, wait: LandingWait) -> bool:
        """Take the message that landed for ``wait`` (recorded) and deliver it, or give
        it back at once if the channel has no room for it."""
        channel = self.channel
        if not channel.qos.can_consume() or wait.queue not in channel.active_queues:
            self.waits.give_back(wait)
            raise virtual.Empty()
        record_as = "" if wait.queue in self.noack_queues else wait.queue
        keys = [*self.unacked_keys(), wait.landing]
        provisional = f"_delayq.unread.{uuid4().hex}"
        try:
            reply = self.scripts.consume(keys, [repr(time()), provisional, record_as])
        except ResponseError as exc:  # Redis refused the call: nothing was taken
            self.warn_refused(exc)
            self.waits.give_back(wait)
            raise virtual.Empty() from None
        if reply is None:  # this consumer's lease ran out and a restore returned it
            raise virtual.Empty()
        taken = self.named(Taken.of(reply), provisional, wait.queue, wait.source, wait.landing)
        if taken is None or not self.deliver_taken(wait.queue, wait.source, wait.landing, taken):
            raise virtual.Empty()
        return True

    def consumed(self, queue: str, no_ack: bool) -> None:
        """``basic_consume`` of ``queue``: whether what is taken from it is recorded."""
        (self.noack_queues.add if no_ack else self.noack_queues.discard)(queue)

    # -- basic_get --

    def get(self, queue: str, no_ack: bool = False) -> Any:
        """kombu's ``basic_get``, taking the message with consume.lua."""
        channel = self.channel
        lists = self.consume_lists([queue])
        keys, args = self.consume_call(lists)
        if no_ack:
            args = args[:2] + [""] * len(lists)
        reply = self.scripts.consume(keys, args)
        refresh_expiry = getattr(channel, "_maybe_update_queues_expire", None)  # kombu >= 5.6
        if refresh_expiry is not None:  # a get counts as use of a queue with x-expires
            with channel.conn_or_acquire() as client:
                refresh_expiry(client, queue)
        if reply is None:
            return None
        source = channel.real_key(lists[reply[0] - 1][0])
        taken = self.named(Taken.of(reply), args[1], queue, source, source)
        if taken is None:
            return None
        try:
            if taken.reason:
                raise UnreadableMessage(taken.reason)
            message = channel.Message(read_payload(taken.message, taken.tag), channel=channel)
        except UnreadableMessage as exc:
            self.dead_letter(queue, source, source, taken, str(exc))
            return None
        if not no_ack:
            self.recorded_tags.add(message.delivery_tag)
            channel.qos.append(message, message.delivery_tag)
        return message


def _pop_if_last(key: str, message: bytes, pipe: Any) -> None:
    """In a WATCH transaction on ``key``: take its last element if it is ``message``."""
    last = pipe.lindex(key, -1)
    pipe.multi()
    if last == message:
        pipe.rpop(key)
