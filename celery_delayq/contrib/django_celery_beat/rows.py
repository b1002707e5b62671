"""A django-celery-beat ``PeriodicTask`` row as a periodic entry of the store, or a
``ValueError`` that says why it cannot be one.

The row is read as django-celery-beat's ``DatabaseScheduler`` reads it (its
``ModelEntry``), so a task sends the same message under either scheduler: the schedule the
row's ``scheduler`` names (an interval, a crontab in its own time zone, a solar event),
``args`` and ``kwargs`` as kombu's JSON, ``queue``, ``exchange``, ``routing_key`` and
``priority`` when set, ``headers`` with ``periodic_task_name`` added, ``expire_seconds``
as each message's expiry (counted from its occurrence), a clocked schedule as one run at
its time, and ``one_off``, ``start_time``, ``expires`` and ``description`` as the entry's
own. A row whose task this app does not know is refused: a row runs as the admin says, or
not at all.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import crontab, solar
from django.conf import settings
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)
from kombu.utils.json import loads

from ...periodic.entry import PeriodicEntry, error_text
from ...periodic.schedules.clocked import clocked
from ...periodic.transfer.django_fixture import bounds
from ..django_beat_rows import columns

__all__ = ["ORIGIN", "row_entry"]

#: The origin of the entries made from rows: the sync removes those whose row is gone,
#: and leaves every other entry alone.
ORIGIN = "django"
#: The row's fields ``DatabaseScheduler`` passes to ``apply_async`` as they are, when set.
ROUTING = ("queue", "exchange", "routing_key", "priority")


def row_entry(app: Celery, row: PeriodicTask, now: datetime) -> PeriodicEntry:
    """The entry ``row`` stands for (a new one is anchored at ``now``); a ``ValueError``
    with the reason for a row that cannot be one."""
    try:
        return _entry(app, row, now)
    except Exception as exc:  # kombu's JSON, a crontab's parser, Django's fields...
        raise ValueError(str(exc) if isinstance(exc, ValueError) else error_text(exc)) from None


def _entry(app: Celery, row: PeriodicTask, now: datetime) -> PeriodicEntry:
    if row.task not in app.tasks:
        raise ValueError(f"no task {row.task!r} is registered in this app")
    rhythm, zone = _schedule(row.scheduler)
    return PeriodicEntry(
        name=row.name,
        task=row.task,
        schedule=rhythm,
        anchor=now,
        timezone=zone or str(app.conf.timezone or "UTC"),
        args=_json(row.args, "[]", list, "args"),
        kwargs=_json(row.kwargs, "{}", dict, "kwargs"),
        options=_options(row),
        enabled=bool(row.enabled),
        origin=ORIGIN,
        **bounds(columns(row)),  # as ``periodic import`` reads them
    )


def _schedule(found: Any) -> tuple[Any, str | None]:
    """The row's schedule, and its own time zone if it has one (a crontab's)."""
    if isinstance(found, IntervalSchedule):
        return timedelta(**{found.period: found.every}), None
    if isinstance(found, CrontabSchedule):
        fields = ("minute", "hour", "day_of_week", "day_of_month", "month_of_year")
        rhythm = crontab(**{name: getattr(found, name) for name in fields})
        # as django-celery-beat: a crontab's zone counts unless DJANGO_CELERY_BEAT_TZ_AWARE
        # is off, and then the app's does
        aware = getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True)
        return rhythm, str(found.timezone) if aware else None
    if isinstance(found, SolarSchedule):
        return solar(found.event, float(found.latitude), float(found.longitude)), None
    if isinstance(found, ClockedSchedule):
        return clocked(found.clocked_time), None
    raise ValueError("it has no schedule")


def _json(text: str | None, empty: str, kind: type, field: str) -> Any:
    value = loads(text or empty)
    if not isinstance(value, kind):
        raise ValueError(f"{field} must be a JSON {kind.__name__}, not {type(value).__name__}")
    return value


def _options(row: PeriodicTask) -> dict[str, Any]:
    """``apply_async``'s options, as ``DatabaseScheduler`` gives them."""
    options = {name: getattr(row, name) for name in ROUTING if getattr(row, name) is not None}
    if row.expire_seconds is not None:
        options["expires"] = row.expire_seconds
    headers = _json(row.headers, "{}", dict, "headers")
    options["headers"] = {**headers, "periodic_task_name": row.name}
    return options
