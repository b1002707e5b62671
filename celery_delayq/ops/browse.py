"""Finding pending tasks by what operators filter on, a page at a time (the web pages).

The store indexes messages by queue and due time only, so those two filters cost
nothing; a task name, a delay key or a search in the arguments needs each message
decoded. A page therefore reads forward in due order, in batches, until it has a page
of matches or has spent its budget (messages looked at, or time): a rare match in a
million pending gives a page with what was found so far and a cursor to search further,
never a request that reads the whole store.

A cursor is a position in the store's total order (due time, queue, message key), and a
page goes on strictly after it (keyset paging): each store call reads at most one batch,
however many messages share a due time, so no cursor can make a request read more. Under
concurrent changes a page may miss a message added behind it, as any keyset paging.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..brokers.common.message import describe
from ..core.results import DeadLetter, PendingMessage, Position
from ..core.store import DelayedStore

#: Messages read per store call while a page fills (of a filter that reads payloads;
#: else a page reads just what it shows, and one more to know there is a next page).
BATCH = 500
#: What a cursor looks like: due ms, then the queue and message key in URL-safe base64
#: (both bounded: a cursor is a page's own link, never a place for a payload).
CURSOR = re.compile(r"(-?[0-9]{1,15})\.([A-Za-z0-9_-]{1,400})\.([A-Za-z0-9_-]{1,400})")


@dataclass(frozen=True)
class TaskFilter:
    """What a listing keeps; empty fields keep everything."""

    queue: str | None = None
    task: str | None = None  # the task name, exactly
    due_after: float | None = None  # epoch seconds, inclusive
    due_before: float | None = None  # epoch seconds, inclusive
    search: str | None = None  # a substring of the args or kwargs repr, any case
    key: str | None = None  # the delay key, exactly

    @property
    def reads_payloads(self) -> bool:
        """Whether matching needs each message decoded (else the index answers)."""
        return bool(self.task or self.search or self.key)

    def matches(self, task: Task) -> bool:
        if self.key and task.key != self.key:
            return False
        if not self._may_match(task.message.record.payload):
            return False
        if self.task and task.name != self.task:
            return False
        if self.search:
            needle = self.search.casefold()
            found = (str(task.info.get(name) or "") for name in ("args", "kwargs", "id"))
            if not any(needle in text.casefold() for text in found):
                return False
        return True

    def _may_match(self, payload: bytes) -> bool:
        """False when the raw message cannot match, found without decoding it (most of
        the cost of a scan): a task name or search text of plain ASCII appears in the
        JSON as it is, so a message without it is no match."""
        if self.task and _verbatim(self.task) and self.task.encode() not in payload:
            return False
        if self.search and _verbatim(self.search):
            return self.search.lower().encode() in payload.lower()
        return True


def _verbatim(text: str) -> bool:
    """Whether JSON writes ``text`` unchanged inside a string (printable ASCII, no quote
    or backslash)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


@dataclass(frozen=True)
class Task:
    """One pending message with what a page shows of it (decoded once, when asked)."""

    message: PendingMessage | DeadLetter

    @cached_property
    def info(self) -> dict[str, Any]:
        return describe(self.message.record.payload)

    @property
    def id(self) -> str:
        return self.message.task_id or str(self.info.get("id") or "")

    @property
    def name(self) -> str | None:
        return self.info.get("task")

    @property
    def key(self) -> str | None:
        raw = self.message.record.delay_key
        return None if raw is None else raw.decode("utf-8", "surrogatepass")


class Cursor:
    """A page's place in the listing, as text for its "Next" link (``Position``)."""

    @staticmethod
    def encode(position: Position) -> str:
        return ".".join((str(position.due_ms), _b64(position.queue.encode()), _b64(position.key)))

    @staticmethod
    def decode(text: str) -> Position:
        """The position a page's link spelled; ValueError for anything else."""
        found = CURSOR.fullmatch(text)
        if found is None:
            raise ValueError(f"not a listing position: {text[:80]!r}")
        try:
            queue = _unb64(found.group(2)).decode("utf-8")
            key = _unb64(found.group(3))
        except (binascii.Error, UnicodeDecodeError):
            raise ValueError(f"not a listing position: {text[:80]!r}") from None
        return Position(int(found.group(1)), queue, key)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Page:
    tasks: list[Task] = field(default_factory=list)
    next: Position | None = None  # None: nothing further matches
    scanned: int = 0
    #: The page stopped at ``scan_budget`` before it was full: more may match further.
    budget_spent: bool = False


def scan(
    store: DelayedStore,
    where: TaskFilter,
    start: Position | None = None,
    batch: int = BATCH,
) -> Iterator[PendingMessage]:
    """Every pending message after ``start``, in due order within ``where``'s queue and
    due window (other filters not applied), read ``batch`` at a time."""
    if start is not None and where.due_after is not None and start.due_ms < where.due_after * 1000:
        start = None  # the window begins further on than the cursor
    while True:
        found = store.pending(
            queue=where.queue,
            due_after=where.due_after,
            due_before=where.due_before,
            limit=batch,
            after=start,
        )
        yield from found
        if len(found) < batch:
            return
        start = found[-1].position


def browse(
    store: DelayedStore,
    where: TaskFilter,
    after: Position | None = None,
    size: int = 50,
    scan_budget: int = 100_000,
    scan_seconds: float | None = None,
) -> Page:
    """One page of matching tasks after ``after``, in due order; the scan stops early
    after ``scan_budget`` messages or ``scan_seconds``, whichever comes first."""
    page = Page()
    deadline = None if scan_seconds is None else time.monotonic() + scan_seconds
    batch = BATCH if where.reads_payloads else size + 1
    last: Position | None = None
    for message in scan(store, where, after, batch):
        if len(page.tasks) == size:  # one more than a page: there is a next one
            page.next = last
            return page
        page.scanned += 1
        last, task = message.position, Task(message)
        if where.matches(task):
            page.tasks.append(task)
        spent = page.scanned >= scan_budget or (
            deadline is not None and time.monotonic() > deadline
        )
        if spent and len(page.tasks) < size:
            page.budget_spent = True
            page.next = last if _more(store, where, last) else None
            return page
    return page


def _more(store: DelayedStore, where: TaskFilter, position: Position) -> bool:
    """Whether anything lies after ``position`` within the queue and due window."""
    window = TaskFilter(where.queue, due_before=where.due_before)
    return next(scan(store, window, position, batch=1), None) is not None


def matching(store: DelayedStore, where: TaskFilter) -> Iterator[Task]:
    """Every pending task that matches, in due order (for acting on all of them)."""
    return (task for task in map(Task, scan(store, where)) if where.matches(task))


def count_matching(store: DelayedStore, where: TaskFilter) -> int:
    """How many pending tasks match: from the index alone unless payloads must be read."""
    if where.reads_payloads:
        return sum(1 for _ in matching(store, where))
    low = -math.inf if where.due_after is None else where.due_after
    high = math.inf if where.due_before is None else where.due_before + 0.001
    counts = store.timeline([low, high])  # [low, high): due_before is inclusive
    return sum(n for queue, (n,) in counts.items() if where.queue in (None, queue))
