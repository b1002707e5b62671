"""Move ETA messages that vanilla publishers sent before the switch into the delayed store.

A message published with an ``eta`` by the plain Redis transport sits in a kombu queue
list until a worker fetches it, and then in kombu's ``unacked`` hash while that worker
holds it in memory until its ETA; beyond ``visibility_timeout`` it is delivered again and
runs twice. ``rescue`` finds such messages (an ``eta`` header in the future by this
host's clock, exactly as the transport decides at publish time) and moves each into the
delayed store with one atomic Lua call: the message leaves its list (``LREM`` of its
exact bytes) or the ``unacked`` hash (``HDEL`` and ``ZREM unacked_index``, only if the
entry is still byte-for-byte what was read) and is scheduled by ``core/lua/schedule.lua``
itself, in the same call, or nothing happens. When a worker took the message meanwhile,
``LREM`` removes nothing and the message is skipped. Everything else (no ETA, a past
ETA, a broadcast, an unreadable message) is left exactly where it is. An ``unacked``
entry is scheduled as kombu would restore it: marked redelivered, into every queue its
exchange and routing key are bound to.

Safe roll-out
-------------
1. Switch every publisher (web, beat, scripts) and every worker to
   ``broker_transport = "celery_delayq.transport:Transport"``, so that no new vanilla ETA
   message is published.
2. Warm-stop every old worker (``SIGTERM``): kombu restores the messages each one held
   to their queue lists (at the end workers pop next), where ``rescue`` finds them.
3. Run ``celery -A proj delayq rescue``.

Entries in ``unacked``: kombu keeps one for every message a worker fetched and has not
acknowledged. An entry whose worker was killed (``SIGKILL``, a lost host) is an orphan
that kombu would only restore after ``visibility_timeout``; rescuing it is safe. An entry
whose worker is still alive is *also held in that worker's memory*: that worker runs it
at its ETA whatever happens in Redis, so rescuing it while the worker lives can run the
task twice. Rescue ``unacked`` only when no worker that fetched those messages is still
running; while old workers live, pass ``--no-unacked`` (the CLI prints a warning line
otherwise). A worker already on the transport that pops a vanilla ETA message from a
list holds it the vanilla way too (the transport diverts messages when they are
published, not when they are consumed), so rescue the lists soon after step 2. The
safest order of all runs ``rescue`` while no worker consumes: stop the old workers,
rescue, then start the new ones. Running ``rescue`` again is harmless: what was rescued
is no longer where it looks. Orphans whose ETA has passed are left to kombu, which
restores them after ``visibility_timeout``.

Lists are read in ``LRANGE`` windows of ``batch`` messages from the head (where kombu
pushes; workers pop at the other end), so a million-message list is never read at
once. A message published during the scan may make a window start earlier than
before, so a message can be examined (and counted) twice, never missed. Each window's
moves go to Redis in one pipeline, each still its own atomic script call. Cost: ``LREM``
compares every element between the nearer end of the list and the message, so one call
on a list of n messages takes up to n/2 comparisons (measured: about 40 ms per message
in a list of a million). Identical bytes in a list are one message (kombu gives each
message its own delivery tag) and are stored once. Run one rescue at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from celery import Celery

from ...brokers.connect import StoreFactory
from ...config.settings import config_of
from .messages import app_exchange_types, app_queue_names
from .report import Outcome, ProgressCallback, RescueProgress, RescueReport, UnreadableMessage
from .rescuer import Rescuer

__all__ = [
    "Outcome",
    "ProgressCallback",
    "RescueProgress",
    "RescueReport",
    "Rescuer",
    "UnreadableMessage",
    "open_rescuer",
    "rescue",
]


@contextmanager
def open_rescuer(app: Celery) -> Iterator[Rescuer]:
    """A Rescuer on a pooled broker connection of ``app`` (which must use the transport)."""
    timezone = config_of(app).timezone
    factory = StoreFactory(app)
    with app.connection_or_acquire() as connection:
        store, release = factory.open(connection)
        try:
            yield Rescuer(store, connection.default_channel, timezone, app_exchange_types(app))
        finally:
            release()


def rescue(
    app: Celery,
    *,
    include_unacked: bool = True,
    queues: list[str] | None = None,
    progress: ProgressCallback | None = None,
    batch: int = 500,
    dry_run: bool = False,
) -> RescueReport:
    """Move every vanilla ETA message of ``queues`` (default: all of the app's) and, with
    ``include_unacked``, of kombu's ``unacked`` hash into the delayed store.

    Read the module docstring before using ``include_unacked`` while workers run.
    ``dry_run`` only counts what would be moved.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch!r}")
    with open_rescuer(app) as rescuer:
        return rescuer.run(
            list(queues) if queues else app_queue_names(app),
            include_unacked=include_unacked,
            batch=batch,
            progress=progress,
            dry_run=dry_run,
        )
