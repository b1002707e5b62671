"""RFC 5545 recurrence rules as a periodic schedule, read by ``dateutil.rrule``.

An entry's schedule may be a ``dateutil.rrule.rrule``, an RRULE string (``"FREQ=WEEKLY;
BYDAY=MO"``, with or without ``RRULE:``, optionally after a ``DTSTART`` line) or an
``rrule_schedule``; the entry keeps it as an ``rrule_schedule``: the rule's RFC 5545 text
and its ``dtstart``, both as wall-clock times of the entry's time zone (an aware
``DTSTART`` or ``UNTIL`` is converted to that zone), so every beat reads back the same
rule. With no ``dtstart``, the rule starts at the entry's ``start_time``, else at the
instant the entry was created (its anchor), as ``dateutil`` starts a rule at "now": the
rule's defaults (``BYHOUR`` of a daily rule, ``BYDAY`` of a weekly one...) come from it.

One rule per entry: ``RDATE``, ``EXDATE``, ``EXRULE``, several ``RRULE`` lines and
dateutil's own ``BYEASTER`` are refused, with a ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Union
from zoneinfo import ZoneInfo

from dateutil.rrule import rrule, rrulestr

__all__ = [
    "MOST_COUNT",
    "RuleFields",
    "RuleParts",
    "as_rrule_schedule",
    "rule_fields",
    "rule_parts",
    "rrule_schedule",
    "wall_of",
]

#: The largest ``COUNT`` accepted: a counted rule is walked from its start to be read (a
#: longer rule takes an ``UNTIL``, or none).
MOST_COUNT = 100_000
#: An ``UNTIL`` in UTC (``...Z``): it needs an aware start to be parsed at all.
_UTC_UNTIL = re.compile(r"UNTIL=\d{8}(T\d{6})?Z", re.IGNORECASE)
_DTSTART = re.compile(r"(^|\s)DTSTART[;:]", re.IGNORECASE)
_RRULE_PREFIX = "RRULE:"


@dataclass(frozen=True)
class rrule_schedule:  # a schedule kind, named as Celery names its own (crontab, solar)
    """An RFC 5545 rule (``rule``: the RRULE value, ``"FREQ=WEEKLY;BYDAY=MO"``) from
    ``dtstart``: a wall-clock time (naive) in the entry's zone, an aware one (converted
    to the entry's zone), or None (the entry's ``start_time``, else its creation)."""

    rule: str
    dtstart: datetime | None = None


#: What an entry's schedule may be given as to make an ``rrule_schedule``.
RuleInput = Union[str, rrule, rrule_schedule]


def as_rrule_schedule(value: RuleInput, zone: ZoneInfo, fallback: datetime) -> rrule_schedule:
    """``value`` as the entry keeps it: its canonical RRULE text (dateutil's spelling,
    ``UNTIL`` as a wall time of ``zone``) and its ``dtstart`` as a wall time of ``zone``.

    ``fallback``: the wall time the rule starts at when it names no start (needed to
    parse it: dateutil derives the rule's defaults from its start). A ``ValueError``
    says what is wrong."""
    parsed, start = _parsed(value, zone, fallback)
    fields = rule_fields(parsed)
    if fields.byeaster:
        raise ValueError("BYEASTER is dateutil's own, not RFC 5545")
    if fields.count is not None and fields.count > MOST_COUNT:
        raise ValueError(f"COUNT is at most {MOST_COUNT:,} (a longer rule takes an UNTIL)")
    canonical = _dateutil(
        parsed.replace,
        dtstart=start or fallback,
        until=None if fields.until is None else wall_of(fields.until, zone),
    )
    text = str(canonical).splitlines()[-1]
    return rrule_schedule(text[len(_RRULE_PREFIX) :], start)


def wall_of(moment: datetime, zone: ZoneInfo) -> datetime:
    """``moment`` as a wall-clock time (naive) of ``zone``: an aware one is converted, a
    naive one is taken as it is, to the second (dateutil drops the microseconds)."""
    if moment.tzinfo is not None and moment.utcoffset() is not None:
        moment = moment.astimezone(zone).replace(tzinfo=None)
    return moment.replace(tzinfo=None, microsecond=0)


@dataclass(frozen=True)
class RuleFields:
    """What a dateutil ``rrule`` was made with that it offers no public accessor for."""

    dtstart: datetime
    count: int | None
    until: datetime | None
    byeaster: bool


@dataclass(frozen=True)
class RuleParts:
    """The rest of what a dateutil ``rrule`` was made with: its frequency, ``INTERVAL``
    and ``WKST`` (dateutil's numbers), and the ``BY`` parts given, by dateutil's keyword
    names (``byweekday``...), not those it takes from its start."""

    freq: int
    interval: int
    wkst: int
    given: dict[str, Any]


def rule_fields(rule: rrule) -> RuleFields:
    """``rule``'s start, ``COUNT``, ``UNTIL`` (as dateutil holds them: aware or not) and
    whether it has dateutil's own ``BYEASTER``. dateutil has no public accessor for them
    (its ``__str__`` drops the start's and the end's zones), so they are read from its
    attributes, here only (with ``rule_parts``): the same from dateutil 2.8.2, the oldest
    allowed, to 2.9 (tests/periodic/test_rrule_times.py pins them); a ``ValueError`` if
    they are not."""
    found = _attributes(rule)
    try:
        byeaster = found["_original_rule"].get("byeaster")
        return RuleFields(found["_dtstart"], found["_count"], found["_until"], bool(byeaster))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"this dateutil's rrule keeps its fields otherwise: {exc!r}") from None


def rule_parts(rule: rrule) -> RuleParts:
    """``rule``'s frequency, ``INTERVAL``, ``WKST`` and ``BY`` parts, read as
    ``rule_fields`` reads the others (and pinned with them)."""
    found = _attributes(rule)
    try:
        given = dict(found["_original_rule"])
        return RuleParts(found["_freq"], found["_interval"], found["_wkst"], given)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"this dateutil's rrule keeps its fields otherwise: {exc!r}") from None


def _attributes(rule: rrule) -> dict[str, Any]:
    try:
        return vars(rule)
    except TypeError as exc:
        raise ValueError(f"not a dateutil rrule: {exc!r}") from None


def _parsed(value: RuleInput, zone: ZoneInfo, fallback: datetime) -> tuple[rrule, datetime | None]:
    """The rule as dateutil reads it, and its own start as a wall time (None: none)."""
    if isinstance(value, rrule):
        return value, wall_of(rule_fields(value).dtstart, zone)
    text, start = _text_of(value, zone)
    placeholder = start or fallback
    if _UTC_UNTIL.search(text):  # dateutil refuses a UTC UNTIL with a wall-clock start
        placeholder = placeholder.replace(tzinfo=zone).astimezone(timezone.utc)
    parsed = _dateutil(rrulestr, text.strip(), dtstart=placeholder, unfold=True, tzids=ZoneInfo)
    if not isinstance(parsed, rrule):
        raise ValueError(
            "one RRULE (with an optional DTSTART): RDATE, EXDATE, EXRULE and several RRULEs "
            "are not supported"
        )
    if _DTSTART.search(text):
        start = wall_of(rule_fields(parsed).dtstart, zone)
    return parsed, start


def _text_of(value: str | rrule_schedule, zone: ZoneInfo) -> tuple[str, datetime | None]:
    """The rule's text, and the start given beside it (a wall time of ``zone``)."""
    if isinstance(value, str):
        return value, None
    if not isinstance(value, rrule_schedule):
        raise ValueError(f"an rrule is a dateutil rrule or RFC 5545 text, not {value!r}")
    if not isinstance(value.rule, str) or _DTSTART.search(value.rule):
        raise ValueError("an rrule_schedule's rule is RRULE text; its start goes in dtstart")
    if value.dtstart is None:
        return value.rule, None
    if not isinstance(value.dtstart, datetime):
        raise ValueError(f"dtstart must be a datetime or None, not {value.dtstart!r}")
    return value.rule, wall_of(value.dtstart, zone)


def _dateutil(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, whatever it raises as a ``ValueError`` that says so
    (dateutil's parser raises more than ``ValueError``, a bad TZID a ``KeyError``)."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        raise ValueError(f"not an RFC 5545 rule: {type(exc).__name__}: {exc}") from None
