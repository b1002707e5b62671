"""celery-redbeat's ``rrule`` schedule and ours, each as the other.

redbeat keeps a rule as dateutil's fields with its ``dtstart`` and ``until`` as instants
at a fixed UTC offset (its JSON stores each as a timestamp and an offset), so its times
keep that offset all year: the clocks' changes move them on the wall. Ours are wall times
of the entry's zone. So a rule goes to redbeat only from a zone that keeps one offset
(``one_offset``: over the next two years, as far as the zone's rules say), and comes from
redbeat in the app's zone when that zone keeps the rule's offset (ahead, and at the rule's
start and end, which become its wall times), else in the fixed-offset zone
``Etc/GMT-<hours>`` (there is none for an offset that is not whole hours). A
``BYDAY`` with a position (``-1FR``) does not go: redbeat's JSON writes the weekday only.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import Celery
from dateutil.rrule import rrulestr

from ..entry import PeriodicEntry, zone_of
from ..schedules.rrules import rule_fields, rule_parts
from .model import app_zone, rule_of

#: How far ahead a zone must keep one UTC offset for a rule in it to go to redbeat.
AHEAD_DAYS = 2 * 366
HOUR = timedelta(hours=1)


def one_offset(zone: ZoneInfo, offset: timedelta, now: datetime) -> bool:
    """Whether ``zone`` is ``offset`` from UTC every day from ``now`` for two years."""
    days = (now + timedelta(days=day) for day in range(AHEAD_DAYS))
    return all(day.astimezone(zone).utcoffset() == offset for day in days)


def their_rule(app: Celery, entry: PeriodicEntry, now: datetime) -> Any:
    """The entry's rule as redbeat's ``rrule`` (its start said: redbeat needs one); a
    ``ValueError`` says why it cannot be one."""
    from redbeat.schedules import rrule

    text, start = rule_of(entry)
    zone = zone_of(entry.timezone)
    offset = start.replace(tzinfo=zone).utcoffset()
    if offset is None or not one_offset(zone, offset, now):
        raise ValueError(
            f"an rrule in {entry.timezone}, whose UTC offset changes: redbeat keeps a rule "
            "at one offset"
        )
    parsed = rrulestr(text, dtstart=start)
    fields, parts = rule_fields(parsed), rule_parts(parsed)
    if any(day.n for day in parts.given.get("byweekday") or ()):
        raise ValueError("a BYDAY with a position (such as -1FR): redbeat keeps the weekday only")
    fixed = timezone(offset)
    until = fields.until
    return rrule(
        parts.freq,
        dtstart=start.replace(tzinfo=fixed),
        interval=parts.interval,
        wkst=parts.wkst,
        count=fields.count,
        until=None if until is None else until.replace(tzinfo=fixed),
        app=app,
        **parts.given,
    )


def our_zone(app: Celery, name: str, rule: Any, now: datetime) -> tuple[str, str]:
    """The zone the redbeat ``rrule`` of the entry ``name`` is kept in here, and the note
    when it is not the app's ("" if it is); a ``ValueError`` if no zone keeps its offset."""
    offset = rule.dtstart.utcoffset() or timedelta(0)
    apps = zone_of(app_zone(app))
    # the rule's start and end become wall times of the zone at their own dates: a zone
    # that kept another offset then (Europe/Istanbul before 2016) would move them
    bounds = [moment for moment in (rule.dtstart, rule.until) if moment is not None]
    kept = all(moment.astimezone(apps).utcoffset() == offset for moment in bounds)
    if kept and one_offset(apps, offset, now):
        return app_zone(app), ""
    if offset % HOUR:
        raise ValueError(
            f"an rrule at UTC offset {offset}: no zone here keeps it (Etc/GMT zones keep "
            "whole hours)"
        )
    hours = offset // HOUR
    zone = f"Etc/GMT{-hours:+d}" if hours else "UTC"
    return zone, f"{name}: redbeat keeps its rule at UTC offset {offset} all year: so does {zone}"
