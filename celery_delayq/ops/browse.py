"""Finding pending tasks by what operators filter on, a page at a time (the web pages).

The store indexes messages by queue and due time only, so those two filters cost
nothing; a task name, a delay key or a search in the arguments needs each message
decoded. A page therefore reads forward in due order, in batches, until it has a page
of matches or has spent its budget (messages looked at, or time): a rare match in a
million pending gives a page with what was found so far and a cursor to search further,
never a request that reads the whole store.

A cursor is a position in the store's total order (due time, queue, message key): the
due time in ms, and how many messages of that same millisecond were already passed. Under
concurrent changes a page may repeat or miss a message at its edge, as any keyset paging.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..celery.message import describe
from ..core.results import DeadLetter, PendingMessage
from ..core.store import DelayedStore

#: Messages read per store call while a page fills.
BATCH = 500
#: The most messages of one millisecond a cursor may have passed.
MAX_PASSED = 100_000


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


@dataclass(frozen=True)
class Cursor:
    """Where a listing goes on: after ``passed`` messages due at ``due_ms``."""

    due_ms: int
    passed: int

    def encode(self) -> str:
        return f"{self.due_ms}.{self.passed}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        """ValueError for anything a page did not write (a listing does not page on
        through more than MAX_PASSED messages due in one millisecond: each page reads
        them all again)."""
        due, _, passed = text.partition(".")
        cursor = cls(int(due), int(passed))
        if not 0 <= cursor.passed <= MAX_PASSED:
            raise ValueError(f"not a listing position: {text!r}")
        return cursor


@dataclass
class Page:
    tasks: list[Task] = field(default_factory=list)
    next: Cursor | None = None  # None: nothing further matches
    scanned: int = 0
    #: The page stopped at ``scan_budget`` before it was full: more may match further.
    budget_spent: bool = False


def scan(
    store: DelayedStore, where: TaskFilter, start: Cursor | None = None
) -> Iterator[tuple[Task, Cursor]]:
    """Every pending message from ``start`` on, in due order within ``where``'s queue
    and due window, each with the cursor just after it (other filters not applied)."""
    position = start or Cursor(-1, 0)
    if where.due_after is not None and position.due_ms < math.ceil(where.due_after * 1000):
        position = Cursor(math.ceil(where.due_after * 1000), 0)
    while True:
        requested = BATCH + position.passed
        # due_after is inclusive; half a ms below keeps float rounding from losing the ms
        batch = store.pending(
            queue=where.queue,
            due_after=None if position.due_ms < 0 else (position.due_ms - 0.5) / 1000,
            due_before=where.due_before,
            limit=requested,
        )
        fresh = batch[position.passed :] if _starts_at(batch, position) else batch
        for message in fresh:
            if message.due_ms == position.due_ms:
                position = Cursor(position.due_ms, position.passed + 1)
            else:
                position = Cursor(message.due_ms, 1)
            yield Task(message), position
        if len(batch) < requested or not fresh:
            return


def _starts_at(batch: list[PendingMessage], position: Cursor) -> bool:
    """Whether the batch begins with the messages the cursor already passed."""
    return bool(batch) and batch[0].due_ms == position.due_ms


def browse(
    store: DelayedStore,
    where: TaskFilter,
    after: Cursor | None = None,
    size: int = 50,
    scan_budget: int = 100_000,
    scan_seconds: float | None = None,
) -> Page:
    """One page of matching tasks after ``after``, in due order; the scan stops early
    after ``scan_budget`` messages or ``scan_seconds``, whichever comes first."""
    page = Page()
    deadline = None if scan_seconds is None else time.monotonic() + scan_seconds
    for task, position in scan(store, where, after):
        page.scanned += 1
        if where.matches(task):
            page.tasks.append(task)
        spent = page.scanned >= scan_budget or (
            deadline is not None and time.monotonic() > deadline
        )
        if len(page.tasks) == size or spent:
            page.budget_spent = len(page.tasks) < size
            page.next = position if _more(store, where, position) else None
            return page
    return page


def _more(store: DelayedStore, where: TaskFilter, position: Cursor) -> bool:
    """Whether anything lies after ``position`` within the queue and due window."""
    window = TaskFilter(where.queue, due_before=where.due_before)
    return next(scan(store, window, position), None) is not None


def matching(store: DelayedStore, where: TaskFilter) -> Iterator[Task]:
    """Every pending task that matches, in due order (for acting on all of them)."""
    return (task for task, _ in scan(store, where) if where.matches(task))


def count_matching(store: DelayedStore, where: TaskFilter) -> int:
    """How many pending tasks match: from the index alone unless payloads must be read."""
    if where.reads_payloads:
        return sum(1 for _ in matching(store, where))
    low = -math.inf if where.due_after is None else where.due_after
    high = math.inf if where.due_before is None else where.due_before + 0.001
    counts = store.timeline([low, high])  # [low, high): due_before is inclusive
    return sum(n for queue, (n,) in counts.items() if where.queue in (None, queue))


def act_on_matching(
    store: DelayedStore, where: TaskFilter, act: Callable[[list[str]], int], chunk: int = 500
) -> int:
    """Apply ``act`` to the ids of every matching task, ``chunk`` at a time (read first,
    then acted on, so acting never disturbs the scan); the sum of what it returns."""
    ids = list(dict.fromkeys(task.id for task in matching(store, where)))
    return sum(act(ids[i : i + chunk]) for i in range(0, len(ids), chunk))
