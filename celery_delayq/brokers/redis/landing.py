"""The atomic consumer's waits (consume.py): when every list was empty, one ``BLMOVE``
per list (queue x priority step), each on a connection of its own, moves the next
message into a landing list of this consumer's, from which the consumer takes it.

While the consumer lives, its landing lists are covered by its lease (a key with
``visibility_timeout`` to live, renewed with the leases of the messages it holds,
restore.py); once the lease is gone, any worker's restore puts what landed back at the
head of its queue (``return_landed.lua``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property, partial
from time import monotonic
from typing import Any

import redis
from kombu.transport import virtual
from redis.exceptions import ResponseError

from .polling import WAIT_TYPE


@dataclass
class LandingWait:
    """One connection waiting (BLMOVE) for a message on one kombu list."""

    kombu_list: str
    queue: str
    source: str  # the list's Redis key
    landing: str  # this consumer's landing list for it
    client: Any  # a redis.Redis holding one connection of its own (kombu's poller reads it)
    waiting: bool = False
    sent_at: float = 0.0
    #: An error left it unknown whether a message landed: give the landing back first.
    unsure: bool = False
    #: When Redis last refused it (the key is not a list, say): not sent again for a while.
    refused_at: float = float("-inf")

    @property
    def event_type(self) -> str:
        return WAIT_TYPE + self.kombu_list


class LandingWaits:
    """The BLMOVE waits of one atomic consumer, by kombu list."""

    def __init__(self, consumer: Any) -> None:
        #: The AtomicConsumer (consume.py) that takes what lands.
        self.consumer = consumer
        self.channel = consumer.channel
        self.consumer_id = uuid.uuid4().hex
        self.by_list: dict[str, LandingWait] = {}

    @property
    def lease_prefix(self) -> str:
        return self.channel.real_key("_delayq.consumer.")

    @property
    def landing_prefix(self) -> str:
        return self.channel.real_key("_delayq.landing.")

    @property
    def landings_key(self) -> str:
        return self.channel.real_key("_delayq.landings")

    def wait_on(self, lists: list[tuple[str, str]], timeout: float) -> None:
        """Have a BLMOVE waiting on each of these lists (those already waiting go on)."""
        channel = self.channel
        cycle = channel.connection.cycle
        for kombu_list, queue in lists:
            wait = self.by_list.get(kombu_list) or self.new_wait(kombu_list, queue)
            if wait.waiting or monotonic() - wait.refused_at < max(timeout, 1.0):
                continue
            if wait.unsure:
                self.give_back(wait)
            if not cycle._client_registered(channel, wait.client, wait.event_type):
                cycle._register(channel, wait.client, wait.event_type)
            wait.client.connection.send_command(
                "BLMOVE", wait.source, wait.landing, "RIGHT", "LEFT", timeout or 0
            )
            wait.waiting, wait.sent_at = True, monotonic()

    def new_wait(self, kombu_list: str, queue: str) -> LandingWait:
        source = self.channel.real_key(kombu_list)
        member = self.consumer_id + source
        pool = self.wait_pool
        pool.max_connections = max(pool.max_connections, len(self.by_list) + 1)
        client = redis.Redis(connection_pool=pool)
        try:
            client.connection = pool.get_connection()
        except TypeError:  # redis-py before 6 needs a command name
            client.connection = pool.get_connection("_")
        wait = LandingWait(kombu_list, queue, source, self.landing_prefix + member, client)
        self.renew_lease()
        self.consumer.plain_client.sadd(self.landings_key, member)
        self.by_list[kombu_list] = wait
        self.channel.handlers[wait.event_type] = partial(self.read, kombu_list)
        return wait

    @cached_property
    def wait_pool(self) -> Any:
        """Connections for the waits, apart from kombu's pool and its connection limit."""
        return self.channel._get_pool(asynchronous=True)

    def give_back(self, wait: LandingWait) -> None:
        """Move what landed for this wait back to the head of its queue."""
        while self.consumer.plain_client.lmove(wait.landing, wait.source, "RIGHT", "RIGHT"):
            pass
        wait.unsure = False

    def renew_lease(self) -> None:
        """Keep this consumer's landing lists its own for another ``visibility_timeout``."""
        lease_ms = max(int(self.channel.visibility_timeout * 1000), 1)
        self.consumer.plain_client.set(self.lease_prefix + self.consumer_id, 1, px=lease_ms)

    def return_landed(self) -> int:
        """Put back what consumers now gone left in their landing lists; how many."""
        prefixes = [self.lease_prefix, self.landing_prefix]
        return int(self.consumer.scripts.return_landed([self.landings_key], prefixes))

    def overdue(self, patience: float) -> list[LandingWait]:
        """Waits that should have replied (BLMOVE's own timeout) ``patience`` ago."""
        now = monotonic()
        return [
            wait
            for wait in self.by_list.values()
            if wait.waiting and now - wait.sent_at > self.consumer.wait_timeout + patience
        ]

    def stop(self) -> None:
        """Close the waits' connections, give back what landed, drop the lease (what lands
        after this is returned by the next restore of any worker)."""
        for wait in self.by_list.values():
            wait.client.connection.disconnect()
            wait.waiting = False
        if not self.by_list:
            return
        try:
            for wait in self.by_list.values():
                self.give_back(wait)
            self.consumer.plain_client.delete(self.lease_prefix + self.consumer_id)
        except self.channel.connection_errors:
            pass  # the lease runs out; a restore returns them
        self.by_list.clear()
        self.wait_pool.disconnect()

    def read(self, kombu_list: str) -> bool:
        """A BLMOVE replied: the consumer takes what landed (or gives it back)."""
        wait = self.by_list[kombu_list]
        wait.waiting = False
        self.consumer.consume_waits = False  # look at every list again before waiting again
        try:
            landed = wait.client.connection.read_response()
        except self.channel.connection_errors:
            wait.unsure = True
            wait.client.connection.disconnect()
            raise
        except ResponseError as exc:  # nothing moved; sent again after its timeout
            self.consumer.warn_refused(exc)
            wait.refused_at = monotonic()
            raise virtual.Empty() from None
        if landed is None:
            raise virtual.Empty()
        return bool(self.consumer.take_landed(wait))
