"""``celery inspect scheduled`` lists the delayed messages too.

A worker answers Celery's ``scheduled`` remote-control command (``inspect().scheduled()``,
Flower's "Scheduled tasks") from the ETA tasks held in its timer. With the transport those
tasks wait in Redis instead, so the answer would be ``[]``. A worker using the transport
therefore adds to its reply the pending delayed messages of the queues it consumes, in
Celery's own format: ``{"eta", "priority", "request"}``, ``request`` being what
``celery.worker.request.Request.info()`` returns for the stored message, built as the
worker builds it when the message arrives, and ``priority`` 6, the priority Celery's
worker gives the timer entry of every ETA task. The timer's own entries (ETA messages
sent by publishers that do not use the transport) come first, unchanged.

One listing per request: several workers consuming one queue would each list its
delayed messages. For each request (kombu's ``ticket``, one per ``inspect()`` call), the
first worker to handle it claims each of its queues with one ``SET NX`` (``DelayedStore.
claim_listing``); the other workers leave those queues out of their replies. A request
aimed at one worker (``destination=[...]``) is handled by that worker alone, so it lists
everything its queues hold. Only kombu's pidbox ``Node.dispatch`` sees the ticket (a
remote-control handler in Celery's ``Panel`` never does), so the extension is a ``Node``
subclass made by the app's own mailbox (``Mailbox.node_cls``), set by the ``worker_init``
hook for apps that use the transport: Celery's module globals, its ``Panel`` and other
apps in the process are not touched.

Bounded: a reply adds at most ``delayq_inspect_limit`` messages (1000 by default), the
earliest due of the claimed queues, so what is listed is exactly everything due up to
the last entry; the worker logs how many were left out. A Redis error while listing is
logged and the reply carries Celery's own entries only.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.utils.imports import symbol_by_name
from celery.worker.request import Request
from celery.worker.strategy import hybrid_to_proto2, proto1_to_proto2
from kombu import pidbox

from ..brokers.common.diverter import DelayqChannel, is_delayq_channel, uses_delayq
from ..brokers.common.message import kombu_message
from ..brokers.connect import open_store
from ..config.settings import config_of
from ..core.results import PendingMessage
from ..core.store import DelayedStore

logger = logging.getLogger(__name__)

#: The remote-control commands that list the worker's ETA tasks (the second is an alias).
SCHEDULED_COMMANDS = frozenset({"scheduled", "dump_schedule"})

#: The priority Celery's worker gives the timer entry of every ETA task
#: (``celery.worker.strategy``), reported as each entry's ``priority``.
ETA_TIMER_PRIORITY = 6


class DelayedScheduleNode(pidbox.Node):
    """kombu's pidbox ``Node`` whose ``scheduled`` also lists delayed messages (put in
    front of the app's own node class, which is kombu's or a subclass of it)."""

    _ticket: str | None = None

    def dispatch(
        self,
        method: str,
        arguments: dict[str, Any] | None = None,
        reply_to: dict[str, Any] | None = None,
        ticket: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Keep the request's ticket at hand while its handler runs."""
        self._ticket = ticket
        try:
            return super().dispatch(method, arguments, reply_to=reply_to, ticket=ticket, **kwargs)
        finally:
            self._ticket = None

    def handle(self, method: str, arguments: dict[str, Any] | None = None) -> Any:
        reply = super().handle(method, arguments)
        if method in SCHEDULED_COMMANDS and isinstance(reply, list):
            reply = reply + delayed_schedule(self.state, self.channel, self._ticket)
        return reply


def list_delayed_in_scheduled(app: Celery) -> None:
    """``worker_init``: the app's remote-control nodes add delayed messages to
    ``scheduled`` (apps using the transport only; calling it twice changes nothing)."""
    if not uses_delayq(app):
        return
    mailbox = app.control.mailbox
    if not issubclass(mailbox.node_cls, DelayedScheduleNode):
        base = mailbox.node_cls
        mailbox.node_cls = type(base.__name__, (DelayedScheduleNode, base), {})


def delayed_schedule(state: Any, channel: Any, ticket: str | None) -> list[dict[str, Any]]:
    """The ``scheduled`` entries of the delayed messages this worker lists in its reply
    to request ``ticket`` (all of its queues' when there is no ticket to share)."""
    app = state.app
    limit = config_of(app).inspect_limit
    if not limit or not is_delayq_channel(channel):
        return []
    try:
        listing = DelayedListing(app, channel, state.hostname, limit)
        return listing.entries(consumed_queues(state.consumer), ticket)
    except Exception as exc:  # never lose Celery's own entries to a listing failure
        logger.warning(
            "celery-delayq: inspect scheduled lists no delayed messages: %r", exc, exc_info=True
        )
        return []


def consumed_queues(consumer: Any) -> set[str]:
    """Names of the queues the worker consumes now (``add_consumer`` and
    ``cancel_consumer`` included)."""
    task_consumer = getattr(consumer, "task_consumer", None)
    if task_consumer is None:
        return set()
    return {queue.name for queue in task_consumer.queues}


class DelayedListing:
    """One worker's listing of delayed messages for one ``scheduled`` request."""

    def __init__(self, app: Celery, channel: DelayqChannel, hostname: str, limit: int):
        self.app = app
        self.channel = channel
        self.hostname = hostname
        self.limit = limit

    def entries(self, consumed: set[str], ticket: str | None) -> list[dict[str, Any]]:
        """The entries of the queues it lists. The store is opened by the one store
        factory (brokers/connect.py), as the command line's and the dashboard's; with
        one connection attempt: a reply is not held up by kombu's retries."""
        with open_store(self.app, fail_fast=True) as store:
            return self._entries(store, consumed, ticket)

    def _entries(
        self, store: DelayedStore, consumed: set[str], ticket: str | None
    ) -> list[dict[str, Any]]:
        queues = [queue for queue in store.queues() if queue in consumed]
        if ticket:
            queues = store.claim_listing(queues, ticket, self.hostname)
        messages = store.earliest(queues, self.limit)
        if len(messages) == self.limit:
            self.note_left_out(store, queues)
        found = (self.entry(message) for message in messages)
        return [entry for entry in found if entry is not None]

    def entry(self, message: PendingMessage) -> dict[str, Any] | None:
        """Celery's ``scheduled`` entry of one stored message; None if it is not a task
        message this worker can read."""
        try:
            received = kombu_message(message.record.payload, self.channel)
            request = request_of(self.app, received, self.hostname)
            request_info = request.info()
        except Exception as exc:
            logger.debug("celery-delayq: inspect scheduled skips %r: %r", message.task_id, exc)
            return None
        return {
            "eta": request.eta.isoformat() if request.eta else None,
            "priority": ETA_TIMER_PRIORITY,
            "request": request_info,
        }

    def note_left_out(self, store: DelayedStore, queues: list[str]) -> None:
        pending = sum(store.pending_counts(queues).values())
        if pending > self.limit:
            logger.info(
                "celery-delayq: inspect scheduled lists the %d earliest of %d delayed messages "
                "of queues %s (delayq_inspect_limit); `celery delayq list` shows them all",
                self.limit,
                pending,
                ", ".join(queues),
            )


class UnregisteredTask:
    """Stands in for a task this worker does not know (it would reject the message as
    unregistered when it arrives); ``Request`` reads only ``ignore_result`` of it."""

    ignore_result = False


def request_of(app: Celery, message: Any, hostname: str) -> Request:
    """The ``Request`` the worker builds when ``message`` arrives (protocol 2, hybrid and
    protocol 1 messages read as ``celery.worker.strategy`` reads them)."""
    headers = message.headers or {}
    if "task" not in headers:  # protocol 1
        body, headers, decoded, utc = proto1_to_proto2(message, message.decode())
    elif "args" in message.payload:  # hybrid
        body, headers, decoded, utc = hybrid_to_proto2(message, message.payload)
    else:
        body, decoded, utc = message.body, False, app.uses_utc_timezone()
    task = app.tasks.get(headers["task"])
    request_cls = symbol_by_name(task.Request) if task is not None else Request
    return request_cls(
        message,
        app=app,
        hostname=hostname,
        task=task or UnregisteredTask(),
        body=body,
        headers=headers,
        decoded=decoded,
        utc=utc,
    )
