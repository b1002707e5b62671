"""A schedule that fires once, at one instant: django-celery-beat's ``ClockedSchedule``.

``clocked(datetime)`` is a small class rather than a bare ``datetime`` given as the
schedule: it reads as a schedule kind beside Celery's ``crontab`` and ``solar`` in
``beat_schedule``, it is what ``periodic.get`` hands back, and an entry's other
datetimes (``start_time``, ``expires``) cannot be mistaken for it. The store keeps it as
``{"clocked": <ms since the epoch>}``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ..cron_times import as_utc

__all__ = ["clocked"]


class clocked:
    """Fire once, at ``at`` (an aware datetime, kept to the millisecond as the store
    keeps times)."""

    __slots__ = ("at",)

    def __init__(self, at: datetime) -> None:
        if not isinstance(at, datetime):
            raise ValueError(f"clocked takes an aware datetime, not {type(at).__name__}")
        utc = as_utc(at, "a clocked time")
        #: The instant, in UTC, to the millisecond.
        self.at = datetime.fromtimestamp(round(utc.timestamp() * 1000) / 1000, timezone.utc)

    def next_after(self, moment: datetime) -> datetime | None:
        """Its one instant if it lies strictly after ``moment``; else None (it has run)."""
        return self.at if self.at > moment else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, clocked) and other.at == self.at

    def __hash__(self) -> int:
        return hash(self.at)

    def __repr__(self) -> str:
        return f"<clocked: {self.at.isoformat()}>"
