"""What a rescue found and did: per-message outcomes, running totals and the report."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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
