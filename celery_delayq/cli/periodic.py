"""``celery delayq periodic ...``: the periodic entries in the store (celery_delayq.periodic)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import click
from celery.schedules import crontab

from ..ops.when import iso
from ..periodic import manage
from ..periodic.audit import MAX_CHANGES, ChangeRecord, acting, changes
from ..periodic.audit.changelog import Record
from ..periodic.describe import entry_text
from ..periodic.entry import CATCH_UP_POLICIES, OVERLAP_POLICIES, schedule_json
from ..periodic.registry import Unreadable
from ..periodic.schedules.clocked import clocked
from .render import current_app, emit, json_option, printable, table


def entry_json(info: manage.EntryInfo) -> dict[str, Any]:
    entry = info.entry
    return {
        "name": entry.name,
        "task": entry.task,
        "schedule": schedule_json(entry.schedule),
        "timezone": entry.timezone,
        "args": list(entry.args),
        "kwargs": dict(entry.kwargs),
        "options": dict(entry.options),
        "catch_up": entry.catch_up,
        "overlap": entry.overlap,
        "enabled": entry.enabled,
        "origin": entry.origin,
        "one_off": entry.one_off,
        "start_time": _iso(entry.start_time),
        "expires": _iso(entry.expires),
        "description": entry.description,
        "added_by": info.added_by,
        "version": info.version,
        "next_runs": [when.isoformat() for when in info.next_runs],
        "last_run": _iso(info.history.last_occurrence),
        "last_started": _iso(info.history.last_started),
        "late": info.history.late,
        "missed": info.history.missed,
        "skipped": info.history.skipped,
        "total_run_count": info.history.total_run_count,
    }


def _iso(moment: datetime | None) -> str | None:
    return iso(None if moment is None else moment.timestamp())


def entries_table(infos: list[manage.EntryInfo]) -> str:
    rows = []
    for info in infos:
        e = entry_json(info)
        rows.append(
            [
                e["name"],
                e["task"],
                entry_text(info.entry),
                e["timezone"],
                "yes" if e["enabled"] else "paused",
                "celery" if e["added_by"] else e["origin"],
                e["next_runs"][0] if e["next_runs"] else "",
                e["last_run"] or "",
                str(e["total_run_count"]),
                f"{e['late']}/{e['missed']}/{e['skipped']}",
            ]
        )
    headers = [
        "name",
        "task",
        "schedule",
        "time zone",
        "enabled",
        "from",
        "next run (UTC)",
        "last run (UTC)",
        "runs",
        "late/missed/skipped",
    ]
    return table(headers, rows)


@click.group()
def periodic() -> None:
    """Periodic entries kept in the store, run once each by any number of beats."""
    # every change a command makes is recorded as the OS user's, through the CLI
    click.get_current_context().with_resource(acting(via="cli"))


@periodic.command(name="list")
@json_option
def list_entries(as_json: bool) -> None:
    """Every entry, with its next run; those stored that cannot be read are named on
    stderr, with why."""
    found = manage.listing(current_app())
    entries = [entry_json(info) for info in found.entries]
    added = [f"{e['name']}: {e['added_by']}" for e in entries if e["added_by"]]
    table = entries_table(found.entries)
    human = "\n".join([table, *added]) if entries else "no periodic entries"
    emit(as_json, entries, human)
    for each in found.unreadable:
        click.echo(unreadable_line(each), err=True)


def unreadable_line(each: Unreadable) -> str:
    return f"periodic entry {each.name!r} cannot be read, and is left out: {each.reason}"


@periodic.command()
@json_option
@click.argument("name")
def show(as_json: bool, name: str) -> None:
    """One entry, whole, with its next three runs."""
    app = current_app()
    info = manage.get(app, name)
    if info is None:
        unreadable = [each for each in manage.listing(app).unreadable if each.name == name]
        if unreadable:
            raise click.ClickException(unreadable_line(unreadable[0]))
        raise click.ClickException(f"no periodic entry named {name!r}")
    data = entry_json(info)
    emit(as_json, data, json.dumps(data, indent=2))


@periodic.command()
@json_option
@click.argument("name")
@click.option("--task", required=True, help="The task's name.")
@click.option("--every", type=float, help="An interval, in seconds.")
@click.option("--crontab", "cron", help='A crontab line: "minute hour day month weekday".')
@click.option("--rrule", help='An RFC 5545 rule: "FREQ=WEEKLY;BYDAY=MO;BYHOUR=9;BYMINUTE=0".')
@click.option("--at", "--clocked", "at", help="Once, at this ISO 8601 time.")
@click.option("--args", "args_json", default="[]", help="Positional arguments, as JSON.")
@click.option("--kwargs", "kwargs_json", default="{}", help="Keyword arguments, as JSON.")
@click.option("--options", "options_json", default="{}", help="apply_async options, as JSON.")
@click.option("--timezone", help="An IANA time zone (default: the app's).")
@click.option("--catch-up", type=click.Choice(CATCH_UP_POLICIES), default="latest")
@click.option(
    "--overlap",
    type=click.Choice(OVERLAP_POLICIES),
    default="allow",
    help="skip: no run starts while the previous one is still going.",
)
@click.option("--one-off", is_flag=True, help="Run its first occurrence only.")
@click.option("--start", help="No run before this ISO 8601 time.")
@click.option("--expires", help="No run after this ISO 8601 time: then the entry has ended.")
@click.option("--description", default="", help="Free text, for people.")
@click.option("--paused", is_flag=True, help="Add it paused.")
def add(as_json: bool, name: str, task: str, **rest: Any) -> None:
    """Add an entry, or replace the one of that name (from its next run). A time with no
    offset is read in the entry's time zone."""
    app = current_app()
    zone = rest["timezone"] or manage.app_zone(app)
    try:
        done = manage.upsert(
            app,
            name,
            task,
            _schedule_of(rest, zone),
            args=_json_of(rest["args_json"], "--args", list),
            kwargs=_json_of(rest["kwargs_json"], "--kwargs", dict),
            options=_json_of(rest["options_json"], "--options", dict),
            timezone=rest["timezone"],
            catch_up=rest["catch_up"],
            overlap=rest["overlap"],
            enabled=not rest["paused"],
            one_off=rest["one_off"],
            start_time=_time_of(rest["start"], "--start", zone),
            expires=_time_of(rest["expires"], "--expires", zone),
            description=rest["description"],
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    verb = "replaced" if done.replaced else "added"
    emit(as_json, {"name": name, verb: True, "version": done.version}, f"{verb} {name!r}")


#: The options that give a schedule, one of which ``add`` takes.
SCHEDULE_OPTIONS = {"every": "--every", "cron": "--crontab", "rrule": "--rrule", "at": "--at"}


def _schedule_of(rest: dict[str, Any], zone: str) -> Any:
    """The schedule of the one schedule option given."""
    given = [key for key in SCHEDULE_OPTIONS if rest[key] is not None]
    if len(given) != 1:
        raise click.UsageError(f"give one of {', '.join(SCHEDULE_OPTIONS.values())}")
    kind, value = given[0], rest[given[0]]
    if kind == "at":
        moment = _time_of(value, "--at", zone)
        assert moment is not None
        return clocked(moment)
    if kind != "cron":
        return value  # seconds, or the rule's text
    fields = value.split()
    if len(fields) != 5:
        raise click.BadParameter("five fields", param_hint="--crontab")
    minute, hour, day, month, weekday = fields  # cron's order, not crontab()'s
    try:
        return crontab(minute, hour, weekday, day, month)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--crontab") from None


def _time_of(text: str | None, option: str, zone: str) -> datetime | None:
    """An ISO 8601 time (``Z`` for UTC); one with no offset is read in ``zone``."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
        return moment if moment.tzinfo else moment.replace(tzinfo=ZoneInfo(zone))
    except (ValueError, KeyError) as exc:  # KeyError: ZoneInfoNotFoundError
        raise click.BadParameter(f"not an ISO 8601 time: {exc}", param_hint=option) from None


@periodic.command()
@json_option
@click.argument("name")
def remove(as_json: bool, name: str) -> None:
    """Remove an entry and its runs still to come."""
    removed = manage.remove(current_app(), name)
    emit(as_json, {"removed": removed}, f"removed {name!r}" if removed else "no such entry")
    if not removed:
        raise SystemExit(1)


@periodic.command()
@json_option
@click.argument("name")
def pause(as_json: bool, name: str) -> None:
    """Pause an entry from its next run."""
    _change(as_json, name, manage.pause, "paused")


@periodic.command()
@json_option
@click.argument("name")
def resume(as_json: bool, name: str) -> None:
    """Resume a paused entry from its next run."""
    _change(as_json, name, manage.resume, "resumed")


@periodic.command()
@json_option
@click.argument("name")
def run(as_json: bool, name: str) -> None:
    """Run an entry once now, besides its schedule."""
    try:
        task_id = manage.run_now(current_app(), name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    emit(as_json, {"task_id": task_id}, f"sent {task_id}")


def _change(as_json: bool, name: str, change: Any, verb: str) -> None:
    try:
        done = change(current_app(), name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    except ValueError as exc:  # resumed, its message cannot be built
        raise click.ClickException(str(exc)) from None
    emit(as_json, {"name": name, verb: True, "version": done.version}, f"{verb} {name!r}")


def _json_of(text: str, option: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=option) from None
    if not isinstance(value, kind):
        raise click.BadParameter(f"a JSON {kind.__name__}", param_hint=option)
    return value


@periodic.command()
@json_option
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_CHANGES),
    default=20,
    show_default=True,
    help="How many changes, newest first.",
)
@click.argument("name")
def history(as_json: bool, limit: int, name: str) -> None:
    """Who changed an entry, when, through what (api, cli, dashboard, admin, settings)
    and what changed, newest first: the store keeps its last 100 changes, for 90 days,
    also after it is removed."""
    found = [change_json(each) for each in changes(current_app(), name, limit)]
    columns = [("at", ""), ("who", ""), ("via", ""), ("action", "unreadable record")]
    rows = [
        [printable(each.get(key, empty)) for key, empty in columns] + [_changes_text(each)]
        for each in found
    ]
    human = table(["when (UTC)", "who", "via", "action", "what changed"], rows)
    emit(as_json, found, human if found else f"no change of {name!r} is recorded")


def change_json(record: Record) -> dict[str, Any]:
    """A record as the CLI prints it: an unreadable one as ``{"unreadable": why}``."""
    if not isinstance(record, ChangeRecord):
        return {"unreadable": record.reason}
    return {
        "at": record.at.isoformat(timespec="milliseconds"),
        "who": record.who,
        "via": record.via,
        "action": record.action,
        "version": record.version,
        "changes": {name: list(pair) for name, pair in record.changed.items()},
        "detail": record.detail,
    }


def _changes_text(each: dict[str, Any]) -> str:
    """One line: ``field: old -> new; ...`` (and the detail)."""
    if "unreadable" in each:
        return printable(each["unreadable"])
    parts = [
        f"{field}: {old or '-'} -> {new or '-'}" for field, (old, new) in each["changes"].items()
    ]
    return printable("; ".join(parts + ([each["detail"]] if each["detail"] else [])))
