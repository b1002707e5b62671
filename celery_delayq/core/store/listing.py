"""Listing pending messages: in due order with keyset paging, by task id, the earliest;
and the claims that let one worker list each queue in reply to an inspect request."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..layout.keys import QueueKeys
from ..layout.record import Record
from ..results import PendingMessage, Position
from .state import READ_CHUNK, StoreState

#: How long a worker's claim to list a queue in its reply to one remote-control request
#: lasts: longer than any client waits for replies, so a late replier cannot list the
#: queue a second time while the client still listens; short, since the claim is not
#: needed once the replies are in.
LISTING_CLAIM_MS = 60_000


class Listing:
    """Reads pending messages with their records."""

    def __init__(self, state: StoreState) -> None:
        self.state = state

    def pending(
        self,
        *,
        queue: str | None = None,
        due_after: float | None = None,
        due_before: float | None = None,
        limit: int = 100,
        newest_first: bool = False,
        after: Position | None = None,
    ) -> list[PendingMessage]:
        """Pending messages in due order (latest first with ``newest_first``), at most
        ``limit``, optionally of one queue and within a due-time window (epoch seconds).

        ``after`` (oldest first only) starts the listing just after that position of the
        total order (due ms, queue, message key) in place of ``due_after``: keyset paging,
        where each call reads at most ``limit`` messages however many share a due time.
        """
        low = "-inf" if due_after is None else repr(due_after * 1000)
        high = "+inf" if due_before is None else repr(due_before * 1000)
        order = "1" if newest_first else "0"
        found: list[PendingMessage] = []
        for keys in self.state.all_shards([queue] if queue else self.state.queues()):
            start, past = (low, b"") if after is None else after.start_in(keys.queue)
            flat = self.state.run(self.state.scripts.pending, keys, start, high, limit, order, past)
            entries = [(key, int(float(due))) for key, due in zip(flat[::2], flat[1::2])]
            found.extend(self._with_records(keys, entries))
        # a total order (due, queue, key), so that a page cut at ``limit`` is the same
        # cut on every call (paging resumes after it: ops/browse.py)
        found.sort(key=lambda m: (m.due_ms, m.queue, m.key), reverse=newest_first)
        return found[:limit]

    def find(self, task_id: str) -> list[PendingMessage]:
        """Every pending message of one Celery task id."""
        found: list[PendingMessage] = []
        for keys in self.state.task_shards(task_id):
            keyed: list[tuple[bytes, int | None]] = [
                (key, None) for key in self.state.message_keys(keys, task_id)
            ]
            found.extend(self._with_records(keys, keyed))
        return sorted(found, key=lambda message: message.due)

    def earliest(self, queues: Iterable[str], limit: int) -> list[PendingMessage]:
        """The ``limit`` earliest due pending messages of these queues, in due order."""
        found = [message for queue in queues for message in self.pending(queue=queue, limit=limit)]
        found.sort(key=lambda message: message.due)
        return found[:limit]

    def claim_listing(
        self, queues: Sequence[str], ticket: str, holder: str, ttl_ms: int = LISTING_CLAIM_MS
    ) -> list[str]:
        """The queues whose delayed messages ``holder`` lists in its reply to the request
        ``ticket``: those nobody claimed first (one atomic ``SET NX`` each, so of all the
        workers answering one request exactly one gets each queue)."""
        if not queues:
            return []
        with self.state.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.set(self.state.keys.inspect_claim(queue, ticket), holder, nx=True, px=ttl_ms)
            claimed = pipe.execute()
        return [queue for queue, won in zip(queues, claimed) if won]

    def _with_records(
        self, keys: QueueKeys, entries: Sequence[tuple[bytes, int | None]]
    ) -> list[PendingMessage]:
        """The messages of these keys that still have a record (due from the page entry
        when known, else from the record)."""
        raws: list[Any] = []
        for at in range(0, len(entries), READ_CHUNK):  # a task may have thousands
            chunk = [key for key, _ in entries[at : at + READ_CHUNK]]
            raws += self.state.client.hmget(keys.messages, chunk)
        found = []
        for (key, due_ms), raw in zip(entries, raws):
            if raw is not None:
                record = Record.decode_or_raw(raw, keys.own_list, due_ms or 0)
                due = record.due_ms if due_ms is None else due_ms
                found.append(PendingMessage(keys.queue, key, due / 1000.0, record))
        return found
