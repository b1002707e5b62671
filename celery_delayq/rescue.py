"""Move ETA messages that vanilla publishers sent before the switch into the delayed store.

A message published with an ``eta`` by the plain Redis transport sits in a kombu queue
list until a worker fetches it, and then in kombu's ``unacked`` hash while that worker
holds it in memory until its ETA; beyond ``visibility_timeout`` it is delivered again and
runs twice. ``rescue`` finds such messages (an ``eta`` header in the future by this
host's clock, exactly as the transport decides at publish time) and moves each into the
delayed store with one atomic Lua call: the message leaves its list (``LREM`` of its
exact bytes) or the ``unacked`` hash (``HDEL`` and ``ZREM unacked_index``, only if the
entry is still byte-for-byte what was read) and is scheduled by ``lua/schedule.lua``
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

import dataclasses
import functools
import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import tzinfo
from enum import Enum
from typing import Any

import click
import redis
from celery import Celery
from kombu.utils.json import dumps, loads
from redis.commands.core import Script

from .config import DelayqConfig
from .connect import store_on
from .errors import ConfigurationError, InvalidETA
from .message import eta_of, eta_timestamp
from .scripts import SOURCES as STORE_SOURCES
from .scripts import read_source
from .store import DelayedStore, ScheduleCall

#: Where a message was found.
LISTS, UNACKED = "lists", "unacked"

#: At most this many error descriptions are kept in a report.
MAX_ERROR_SAMPLES = 20


class Outcome(Enum):
    """What happened to one examined message."""

    RESCUED = "rescued"
    NOT_DELAYED = "not delayed"  # the transport would not delay it: left alone
    GONE = "gone"  # taken by a worker (or changed) between the scan and the move


class UnreadableMessage(Exception):
    """A message that cannot be examined (bad JSON, bad ETA, no queue bound): left alone."""


@dataclass(frozen=True)
class RescueProgress:
    """Running totals, reported after each window of a scan."""

    source: str  # LISTS or UNACKED
    key: str  # the kombu list or hash being scanned (without global_keyprefix)
    examined: int
    rescued: int
    skipped: int


@dataclass
class RescueReport:
    """What one ``rescue`` (or, with ``dry_run``, one count of candidates) found and did.

    In a dry run the ``rescued_*`` fields count the messages that would be rescued.
    """

    examined: int = 0
    rescued_from_lists: int = 0
    rescued_from_unacked: int = 0
    skipped_not_delayed: int = 0
    skipped_gone: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)  # whose lists were scanned
    include_unacked: bool = True
    dry_run: bool = False

    @property
    def rescued(self) -> int:
        return self.rescued_from_lists + self.rescued_from_unacked

    @property
    def skipped(self) -> int:
        return self.skipped_not_delayed + self.skipped_gone + self.errors

    def count(self, source: str, outcome: Outcome) -> None:
        self.examined += 1
        if outcome is Outcome.RESCUED and source == LISTS:
            self.rescued_from_lists += 1
        elif outcome is Outcome.RESCUED:
            self.rescued_from_unacked += 1
        elif outcome is Outcome.NOT_DELAYED:
            self.skipped_not_delayed += 1
        else:
            self.skipped_gone += 1

    def count_error(self, description: str) -> None:
        self.examined += 1
        self.errors += 1
        if len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(description)

    def progress(self, source: str, key: str) -> RescueProgress:
        return RescueProgress(source, key, self.examined, self.rescued, self.skipped)

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "rescued": self.rescued, "skipped": self.skipped}


ProgressCallback = Callable[[RescueProgress], None]


# --- Lua ----------------------------------------------------------------------------

#: The store's own schedule script as a Lua function, so a rescue schedules each message
#: with the very code (and arguments) a publish uses; see lua/rescue_schedule.lua.
SCHEDULE_FUNCTION = f"local function schedule(KEYS, ARGV)\n{STORE_SOURCES['schedule']}\nend\n"


@dataclass(frozen=True)
class RescueScripts:
    """The two atomic rescue operations, bound to one client."""

    rescue_list: Script
    rescue_unacked: Script

    @classmethod
    def register(cls, client: redis.Redis) -> RescueScripts:
        return cls(**{name: client.register_script(source) for name, source in SOURCES.items()})


#: Read at import, like ``scripts.SOURCES`` (never lazily in a thread of a forking worker).
SOURCES = {
    f.name: SCHEDULE_FUNCTION + read_source("rescue_schedule") + read_source(f.name)
    for f in dataclasses.fields(RescueScripts)
}


def schedule_all_args(calls: list[ScheduleCall]) -> tuple[list[Any], list[Any]]:
    """Keys and arguments of ``schedule_all`` (lua/rescue_schedule.lua) for these calls."""
    keys = [key for call in calls for key in call.keys]
    args = [len(calls), len(calls[0].keys), len(calls[0].args)]
    return keys, args + [arg for call in calls for arg in call.args]


# --- Finding and moving messages ----------------------------------------------------


def app_queue_names(app: Celery) -> list[str]:
    """Every queue the app knows (``app.amqp.queues``) plus its default queue."""
    names = {queue.name for queue in app.amqp.queues.values()}
    names.add(app.conf.task_default_queue)
    return sorted(names)


def app_exchange_types(app: Celery) -> dict[str, str]:
    """Exchange name -> type, from the app's queues (a fresh channel knows none)."""
    return {
        queue.exchange.name: queue.exchange.type
        for queue in app.amqp.queues.values()
        if queue.exchange is not None and queue.exchange.name
    }


def decode_message(raw: bytes) -> dict[str, Any]:
    """The kombu message envelope of a queue list entry."""
    try:
        return checked_message(loads(raw))
    except ValueError as exc:
        raise UnreadableMessage(f"not JSON: {exc}") from exc


def decode_unacked(raw: bytes) -> tuple[dict[str, Any], str, str]:
    """Message, exchange and routing key of an ``unacked`` entry (kombu's ``QoS.append``)."""
    try:
        entry = loads(raw)
    except ValueError as exc:
        raise UnreadableMessage(f"not JSON: {exc}") from exc
    if not (isinstance(entry, list) and len(entry) == 3):
        raise UnreadableMessage("not a kombu unacked entry [message, exchange, routing key]")
    message, exchange, routing_key = entry
    return checked_message(message), str(exchange or ""), str(routing_key or "")


def checked_message(message: Any) -> dict[str, Any]:
    """``message`` if it has the shape of a kombu envelope, so reading it cannot fail."""
    if not isinstance(message, dict):
        raise UnreadableMessage(f"not a kombu message: {type(message).__name__}")
    for part in ("headers", "properties"):
        if not isinstance(message.get(part) or {}, dict):
            raise UnreadableMessage(f"{part} is not an object")
    return message


def mark_redelivered(message: dict[str, Any]) -> None:
    """Flag a message the way kombu's ``_do_restore_message`` does before pushing it back."""
    try:
        message["headers"]["redelivered"] = True
        message["properties"]["delivery_info"]["redelivered"] = True
    except (KeyError, TypeError):
        pass


@dataclass(frozen=True)
class Move:
    """One planned atomic rescue: a script and its KEYS and ARGV."""

    script: Script
    keys: list[Any]
    args: list[Any]


class Rescuer:
    """Examines and moves the messages of one app's queues, one atomic script call each.

    ``channel`` is the kombu Redis channel of the store's connection: it names priority
    lists and resolves bindings exactly as the workers and publishers do.
    """

    def __init__(
        self,
        store: DelayedStore,
        channel: Any,
        timezone: tzinfo | None,
        exchange_types: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.client = store.client
        self.channel = channel
        self.timezone = timezone
        self.exchange_types = exchange_types or {}
        self.scripts = RescueScripts.register(store.client)

    # -- keys

    def real_key(self, kombu_key: str) -> str:
        """The Redis key of a kombu key (kombu's ``global_keyprefix`` applied)."""
        return self.store.keys.destination(kombu_key)

    def queue_lists(self, queue: str) -> list[str]:
        """The kombu lists of one queue: the bare name and its priority sub-lists."""
        steps = self.channel.priority_steps
        return list(dict.fromkeys(self.channel._q_for_pri(queue, step) for step in steps))

    # -- deciding

    def future_eta(self, message: dict[str, Any]) -> float | None:
        """The ETA (epoch seconds) when the transport would delay this message, else None."""
        eta = eta_of(message)
        if eta is None:
            return None
        try:
            seconds = eta_timestamp(eta, self.timezone)
        except InvalidETA as exc:
            raise UnreadableMessage(str(exc)) from exc
        return seconds if seconds > time.time() else None

    def schedule_call(
        self, queue: str, message: dict[str, Any], payload: bytes, eta: float
    ) -> ScheduleCall:
        """The store call for one message, exactly as a publish through the transport
        would make it."""
        return self.store.schedule_call(**self.channel.delayed_fields(queue, message, payload, eta))

    def bound_queues(self, exchange: str, routing_key: str) -> list[str] | None:
        """Queues a restore would push to (kombu's ``_lookup``), or None for a broadcast.

        Unlike ``_lookup`` there is no dead-letter fallback: an unbound message is
        unreadable here and stays where it is.
        """
        if not exchange:
            queues = [routing_key] if routing_key else []
        else:
            kind = self.exchange_types.get(exchange) or self.channel.typeof(exchange).type
            if kind == "fanout":
                return None  # broadcasts are never delayed
            exchange_type = self.channel.exchange_types.get(kind)
            if exchange_type is None:
                raise UnreadableMessage(f"unknown exchange type {kind!r} of {exchange!r}")
            table = self.channel.get_table(exchange)
            queues = sorted(exchange_type.lookup(table, exchange, routing_key, None))
        if not queues:
            raise UnreadableMessage(f"no queue bound to {exchange!r} for {routing_key!r}")
        return queues

    # -- planning one message (no writes); None: the transport would not delay it

    def plan_list_message(
        self, queue: str, kombu_list: str, raw: bytes, index: int = 0
    ) -> Move | None:
        """LREM the exact bytes and schedule them as they are. ``index`` (where the scan
        saw the message) only tells the script which end of the list to search from."""
        message = decode_message(raw)
        eta = self.future_eta(message)
        if eta is None:
            return None
        keys, args = schedule_all_args([self.schedule_call(queue, message, raw, eta)])
        list_key = self.real_key(kombu_list)
        return Move(self.scripts.rescue_list, [list_key, *keys], [raw, index, *args])

    def plan_unacked_entry(self, tag: bytes, raw: bytes) -> Move | None:
        """HDEL the entry and schedule it as kombu would restore it (``_do_restore_message``:
        marked redelivered, to every queue the exchange binds the routing key to)."""
        message, exchange, routing_key = decode_unacked(raw)
        eta = self.future_eta(message)
        queues = self.bound_queues(exchange, routing_key) if eta is not None else None
        if eta is None or queues is None:
            return None
        mark_redelivered(message)
        payload = dumps(message).encode()
        calls = [self.schedule_call(queue, message, payload, eta) for queue in queues]
        keys, args = schedule_all_args(calls)
        unacked = [self.real_key(self.channel.unacked_key)]
        unacked.append(self.real_key(self.channel.unacked_index_key))
        return Move(self.scripts.rescue_unacked, [*unacked, *keys], [tag, raw, *args])

    # -- moving

    def rescue_list_message(
        self, queue: str, kombu_list: str, raw: bytes, index: int = 0
    ) -> Outcome:
        """Move one message of a queue list if it is a vanilla ETA message."""
        move = self.plan_list_message(queue, kombu_list, raw, index)
        return self.run_moves([move])[0] if move else Outcome.NOT_DELAYED

    def rescue_unacked_entry(self, tag: bytes, raw: bytes) -> Outcome:
        """Move one ``unacked`` entry if it is a vanilla ETA message."""
        move = self.plan_unacked_entry(tag, raw)
        return self.run_moves([move])[0] if move else Outcome.NOT_DELAYED

    def run_moves(self, moves: list[Move]) -> list[Outcome]:
        """Run planned moves in one round trip (a pipeline, not a transaction): each is
        still its own atomic script call, which moves its message or finds it gone."""
        with self.client.pipeline(transaction=False) as pipe:
            for move in moves:
                move.script(keys=move.keys, args=move.args, client=pipe)
            results = pipe.execute()
        return [Outcome.RESCUED if moved else Outcome.GONE for moved in results]

    # -- scans

    def scan_list(
        self,
        queue: str,
        kombu_list: str,
        report: RescueReport,
        batch: int,
        progress: ProgressCallback | None,
    ) -> None:
        """Examine one list in windows from its head; moves unless ``report.dry_run``.

        Each message moved (or taken by a worker) shifts the later ones one place towards
        the head, so the next window starts that many places earlier.
        """
        key, start = self.real_key(kombu_list), 0
        while True:
            window: list[bytes] = self.client.lrange(key, start, start + batch - 1)  # type: ignore[assignment]
            if not window:
                return
            moves: list[Move] = []
            for offset, raw in enumerate(window):
                index = start + offset - len(moves)  # the moves before it run first
                plan = functools.partial(self.plan_list_message, queue, kombu_list, raw, index)
                move = self._plan(report, LISTS, f"list {kombu_list!r}", plan)
                if move:
                    moves.append(move)
            removed = self._apply(report, LISTS, moves)
            start += len(window) - removed
            if progress:
                progress(report.progress(LISTS, kombu_list))

    def scan_unacked(
        self, report: RescueReport, batch: int, progress: ProgressCallback | None
    ) -> None:
        """Examine every ``unacked`` entry once (HSCAN), ``batch`` entries at a time."""
        kombu_key = self.channel.unacked_key
        entries = self.client.hscan_iter(self.real_key(kombu_key), count=batch)
        seen: set[bytes] = set()
        while chunk := list(itertools.islice(entries, batch)):
            moves = []
            for tag, raw in chunk:
                if tag in seen:  # HSCAN may return an entry twice
                    continue
                seen.add(tag)
                where = f"unacked {tag.decode(errors='replace')!r}"
                plan = functools.partial(self.plan_unacked_entry, tag, raw)
                move = self._plan(report, UNACKED, where, plan)
                if move:
                    moves.append(move)
            self._apply(report, UNACKED, moves)
            if progress:
                progress(report.progress(UNACKED, kombu_key))

    def _plan(
        self, report: RescueReport, source: str, where: str, plan: Callable[[], Move | None]
    ) -> Move | None:
        """The move for one message, or None when it stays where it is (counted then:
        not delayed, or unreadable)."""
        try:
            move = plan()
        except UnreadableMessage as exc:
            report.count_error(f"{where}: {exc}")
            return None
        if move is None:
            report.count(source, Outcome.NOT_DELAYED)
        return move

    def _apply(self, report: RescueReport, source: str, moves: list[Move]) -> int:
        """Run the moves (a dry run only counts them); how many messages left their place."""
        if report.dry_run:
            outcomes = [Outcome.RESCUED] * len(moves)
        else:
            outcomes = self.run_moves(moves) if moves else []
        for outcome in outcomes:
            report.count(source, outcome)
        return 0 if report.dry_run else len(outcomes)

    def run(
        self,
        queues: list[str],
        *,
        include_unacked: bool,
        batch: int,
        progress: ProgressCallback | None,
        dry_run: bool = False,
    ) -> RescueReport:
        """Scan every list of ``queues``, then (optionally) the ``unacked`` hash."""
        report = RescueReport(queues=queues, include_unacked=include_unacked, dry_run=dry_run)
        for queue in queues:
            for kombu_list in self.queue_lists(queue):
                self.scan_list(queue, kombu_list, report, batch, progress)
        if include_unacked:
            self.scan_unacked(report, batch, progress)
        return report


# --- Library entry points -----------------------------------------------------------


@contextmanager
def open_rescuer(app: Celery) -> Iterator[Rescuer]:
    """A Rescuer on a pooled broker connection of ``app`` (which must use the transport)."""
    config = DelayqConfig.from_app(app)
    with app.connection_or_acquire() as connection:
        store = store_on(connection, config)
        yield Rescuer(store, connection.default_channel, config.timezone, app_exchange_types(app))


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


# --- Command line -------------------------------------------------------------------

UNACKED_WARNING = (
    "warning: an entry in 'unacked' whose worker is still alive is also held in that "
    "worker's memory; rescuing it then can run the task twice. Stop the old workers "
    "first, or pass --no-unacked."
)


class ProgressLines:
    """Progress as a line on stderr at most every ``interval`` seconds (long runs only)."""

    def __init__(self, verb: str, interval: float = 2.0) -> None:
        self.verb = verb
        self.interval = interval
        self.last = time.monotonic()

    def __call__(self, progress: RescueProgress) -> None:
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        self.last = now
        click.echo(
            f"{self.verb}: examined {progress.examined}, {progress.rescued} with a future ETA, "
            f"{progress.skipped} left alone (now {progress.source} {progress.key!r})",
            err=True,
        )


def describe(report: RescueReport) -> str:
    """The human summary of a rescue."""
    lines = [
        f"Rescued {report.rescued} message(s): {report.rescued_from_lists} from queue lists, "
        f"{report.rescued_from_unacked} from unacked.",
        f"Left alone: {report.skipped_not_delayed} not delayed, {report.skipped_gone} taken "
        f"by a worker meanwhile, {report.errors} unreadable (of {report.examined} examined).",
    ]
    lines += [f"  unreadable: {sample}" for sample in report.error_samples]
    return "\n".join(lines)


@click.command("rescue")
@click.option(
    "--queue",
    "-Q",
    "queues",
    multiple=True,
    help="Only this queue (repeatable); default: every queue of the app.",
)
@click.option(
    "--no-unacked",
    is_flag=True,
    help="Leave kombu's 'unacked' hash alone (while old workers still run).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
def rescue_command(
    ctx: click.Context, queues: tuple[str, ...], no_unacked: bool, as_json: bool, yes: bool
) -> None:
    """Move ETA messages sent by vanilla publishers into the delayed store.

    Run it once every publisher and worker uses the transport and the old workers are
    stopped, so that their held messages are back in the queue lists. Counts the
    candidates first and asks before moving anything (unless --yes).
    """
    app: Celery = ctx.find_root().obj.app
    options: dict[str, Any] = {"include_unacked": not no_unacked, "queues": list(queues) or None}
    if not no_unacked:
        click.echo(UNACKED_WARNING, err=True)
    try:
        found = rescue(app, dry_run=True, progress=ProgressLines("counting"), **options)
    except ConfigurationError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"Found {found.rescued} message(s) with a future ETA: {found.rescued_from_lists} in "
        f"queue lists, {found.rescued_from_unacked} in unacked (of {found.examined} examined).",
        err=True,
    )
    if found.rescued:
        if not yes:
            click.confirm("Move them into the delayed store?", abort=True, err=True)
        report = rescue(app, progress=ProgressLines("rescuing"), **options)
    else:
        report = dataclasses.replace(found, dry_run=False)  # nothing to move: the count says it all
    if as_json:
        click.echo(json.dumps({**report.as_dict(), "candidates": found.rescued}, indent=2))
    else:
        click.echo(describe(report))
