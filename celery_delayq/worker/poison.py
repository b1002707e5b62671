"""A message Celery cannot handle goes to the dead letters instead of stopping the worker.

Celery's consumer hands each message to ``on_task_received`` (``Consumer.
create_task_handler``), which catches only a few exception types: anything else ends the
worker ("Unrecoverable error"), and the broker delivers the message again to the next
worker, which dies on it too. Some errors come later, out of the pool's own callbacks (a
``timelimit`` header that is no number fails when the task starts), or after the
request has taken a pool slot that is then never given back (a ``stamped_headers``
that is no list, headers nested too deep to pickle).

So, for every broker, the worker's consumer step ``PoisonGuard`` wraps that handler:

- a message delivered more than ``delayq_max_deliveries`` times goes to the dead letters
  (a message that kills its worker outright, by memory or a crash in C, comes back
  after each death, counted by its broker: the ``delayq_redeliveries`` header on Redis,
  SQS's ``ApproximateReceiveCount``, RabbitMQ's ``x-delivery-count`` on quorum queues);
- a message whose headers Celery would fail on after taking it, or whose properties its
  transport could not read (``UNREADABLE_HEADER``: brokers/amqp/inbound.py), goes to the
  dead letters before Celery sees it (``refusal``);
- any exception from handing a message to Celery sends that message to the dead letters.

A dead letter is written to the delayed store (the broker's Redis, or
``delayq_store_url``) under the queue the message was taken from, with the reason
(``celery delayq dead``; ``dead resend`` puts it back in that queue); then the message is
acknowledged, so the broker does not deliver it again. Killed in between, the worker
leaves a second copy (a dead letter and the message), never none. While the store cannot
be written, the message goes back to its queue a few seconds later, to be tried again.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import bootsteps
from celery.worker import state
from kombu.exceptions import DecodeError
from kombu.utils.encoding import safe_repr

from ..brokers.common.message import UNREADABLE_HEADER, Delivered, file_dead_letter
from ..config.settings import config_of

logger = logging.getLogger(__name__)

#: Seconds a message whose dead letter could not be written waits before it is requeued.
GIVE_BACK_AFTER = 5.0

#: Deepest nesting of the headers and properties a message may have: Celery pickles them
#: to hand the task to a pool process, and deep nesting exhausts Python's recursion limit.
MAX_DEPTH = 64


class PoisonGuard(bootsteps.Step):
    """The consumer step that wraps Celery's task handler with ``Guard``."""

    label = "celery-delayq poison guard"

    def __init__(self, consumer: Any, **kwargs: Any) -> None:
        guard_task_handler(consumer, config_of(consumer.app).max_deliveries)
        super().__init__(consumer, **kwargs)


def guard_task_handler(consumer: Any, max_deliveries: int) -> None:
    """Make every task handler ``consumer`` creates (once per connection) a ``Guard``."""
    create = consumer.create_task_handler
    if getattr(create, "guarded", False):
        return

    def create_task_handler(*args: Any, **kwargs: Any) -> Guard:
        return Guard(consumer, create(*args, **kwargs), max_deliveries)

    create_task_handler.guarded = True  # type: ignore[attr-defined]
    consumer.create_task_handler = create_task_handler


class Guard:
    """Celery's ``on_task_received`` for one connection, behind the checks above."""

    def __init__(
        self, consumer: Any, on_task_received: Callable[[Any], Any], max_deliveries: int
    ) -> None:
        self.consumer = consumer
        self.on_task_received = on_task_received
        self.max_deliveries = max_deliveries

    def __call__(self, message: Any) -> Any:
        try:
            reason = self.refusal(message)
            if reason is None:
                return self.on_task_received(message)
        except self.consumer.connection_errors:
            raise  # the broker's: Celery reconnects, and the message comes back
        except Exception as exc:  # anything else a message makes Celery raise
            forget_request(message)
            reason = f"Celery failed on it: {safe_repr(exc)}"[:300]
        self.dead_letter(message, reason)
        return None

    def refusal(self, message: Any) -> str | None:
        """Why ``message`` must not reach Celery, or None."""
        count = delivery_count(message)
        if self.max_deliveries and count > self.max_deliveries:
            return (
                f"delivered {count} times (delayq_max_deliveries is {self.max_deliveries}): "
                "it may stop the worker that takes it"
            )
        return unreadable_problem(message) or header_problem(message)

    def dead_letter(self, message: Any, reason: str) -> None:
        """Move ``message`` to the dead letters of its queue, then acknowledge it; if the
        dead letter cannot be written, give it back to the broker instead."""
        channel = message.channel
        delivered = delivered_of(message)
        errors = self.consumer.connection_errors
        try:
            file_dead_letter(channel.diverter.store, delivered, reason)
        except Exception as exc:  # the store is down: the message waits in its queue
            logger.error(
                "A message of queue %r that Celery cannot take could not go to the dead "
                "letters (%r); it goes back to its queue in %g s: %s",
                delivered.queue,
                exc,
                GIVE_BACK_AFTER,
                reason,
            )
            self.consumer.timer.call_after(GIVE_BACK_AFTER, self.give_back, (message,))
            return
        if not message.acknowledged:  # Celery may have acked or rejected it, then failed
            message.ack_log_error(logger, errors)
        logger.warning(
            "A message of queue %r went to the dead letters instead of to Celery "
            "(`celery delayq dead`): %s",
            delivered.queue,
            reason,
        )

    def give_back(self, message: Any) -> None:
        """Requeue a message whose dead letter could not be written (it comes back, and
        is tried again): a while later, so a store outage makes no busy loop of it."""
        if not message.acknowledged:
            message.reject_log_error(logger, self.consumer.connection_errors, requeue=True)


def delivered_of(message: Any) -> Delivered:
    """Where ``message`` came from and its envelope, as its channel tells (encoding
    headers nested as deep as their decoding allowed). Should the channel fail, a dead
    letter without the envelope, filed by routing key: never a worker stopped by it."""
    try:
        with recursion_room():
            delivered: Delivered = message.channel.delivered(message)
            return delivered
    except Exception as exc:
        logger.error("The envelope of a poison message cannot be kept: %r", exc)
        queue = str((message.delivery_info or {}).get("routing_key") or "")
        return Delivered(queue, "", b"")


@contextmanager
def recursion_room(limit: int = 10_000) -> Iterator[None]:
    """Python's recursion limit raised, for as long as the block runs."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def delivery_count(message: Any) -> int:
    """How many times the broker has delivered ``message``, this time included (0 when
    its broker does not tell)."""
    count = getattr(message.channel, "delivery_count", None)
    return int(count(message)) if count is not None else 0


def unreadable_problem(message: Any) -> str | None:
    """Why the transport could not read ``message``'s properties, if it says so."""
    headers = message.headers
    if isinstance(headers, dict) and UNREADABLE_HEADER in headers:
        return str(headers[UNREADABLE_HEADER])[:300]
    return None


def header_problem(message: Any) -> str | None:
    """Why Celery would fail on ``message``'s headers after taking it (in the pool's
    callbacks, or holding a pool slot it never gives back), or None."""
    headers = message.headers
    if not isinstance(headers, dict):
        return None  # Celery's own check refuses it
    if nested_deeper(MAX_DEPTH, headers, message.properties):
        return f"its headers or properties nest deeper than {MAX_DEPTH} levels"
    reason = name_problem(headers)
    if reason:
        return reason
    try:
        message.decode()  # kept by kombu for Celery; a body Celery cannot decode it discards
    except DecodeError as exc:
        return f"its body cannot be decoded: {safe_repr(exc)}"[:300]
    limits = headers.get("timelimit")
    if limits is not None and not (
        isinstance(limits, (list, tuple)) and len(limits) == 2 and all(map(is_limit, limits))
    ):
        return 'its "timelimit" header is not two numbers of seconds (or nulls)'
    stamped = headers.get("stamped_headers")
    if stamped is not None and not (
        isinstance(stamped, list) and all(isinstance(name, str) for name in stamped)
    ):
        return 'its "stamped_headers" header is not a list of names'
    stamps = headers.get("stamps")
    if stamps is not None and not isinstance(stamps, dict):
        return 'its "stamps" header is not an object'
    return None


def name_problem(headers: dict[str, Any]) -> str | None:
    """Why the task's name in ``headers`` would make Celery fail, or None."""
    if "task" in headers and not isinstance(headers["task"], str):
        return 'its "task" header is not a name'  # Celery would discard it as unregistered
    shadow = headers.get("shadow")
    if shadow and not isinstance(shadow, str):
        # Celery names the request by it, and counts accepted tasks by name when the pool
        # starts one: a list or object made that callback fail before the message was
        # acknowledged, so the task ran, and ran again after every restore
        return 'its "shadow" header is not a name'
    return None


def is_limit(value: Any) -> bool:
    """Whether a time limit is None or a finite number of seconds."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: What the nesting walk descends into.
CONTAINERS = (dict, list, tuple)


def nested_deeper(limit: int, *values: Any) -> bool:
    """Whether any of ``values`` nests lists, tuples or dicts more than ``limit`` deep
    (without recursion: it must not fail on what it checks). Only containers go on the
    stack: a message's scalars are most of it, and this runs for every message."""
    stack = [(value, 1) for value in values if isinstance(value, CONTAINERS)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, CONTAINERS))
    return False


def forget_request(message: Any) -> None:
    """Drop what Celery recorded of a request it failed on (reserved, active), so the
    worker does not report it, or count it against its prefetch, for ever."""
    for request in [*state.reserved_requests, *state.active_requests]:
        if getattr(request, "message", None) is message:
            state.reserved_requests.discard(request)
            state.active_requests.discard(request)
            state.requests.pop(request.id, None)
