"""The Rescuer: scans an app's queue lists and ``unacked`` hash and moves each vanilla ETA
message into the store with one atomic script call."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any

from kombu.utils.json import dumps
from redis.commands.core import Script

from ...brokers.common.message import eta_of, eta_timestamp
from ...config.errors import InvalidETA, MessageTooLarge
from ...core.lua import ScheduleCall
from ...core.redis_replies import list_reply
from ...core.store import DelayedStore
from .messages import decode_message, decode_unacked, mark_redelivered
from .report import LISTS, UNACKED, Outcome, ProgressCallback, RescueReport, UnreadableMessage
from .scripts import RescueScripts, schedule_all_args


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
        would make it. One bigger than ``delayq_max_message_size`` stays where it is."""
        try:
            scheduled = self.channel.delayed(queue, message, payload, eta)
        except MessageTooLarge as exc:
            raise UnreadableMessage(str(exc)) from exc
        return self.store.schedule_call(scheduled)

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
            window = list_reply(self.client.lrange(key, start, start + batch - 1))
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
            for kombu_list in self.channel.queue_lists(queue):
                self.scan_list(queue, kombu_list, report, batch, progress)
        if include_unacked:
            self.scan_unacked(report, batch, progress)
        return report
