"""What the pages change: cancel, promote and reschedule pending tasks, send dead letters
again or drop them, pause (with a note), resume, run now or remove periodic entries (the
periodic entry form: periodic_form.py). Every action is a POST
(CSRF-checked by Flask-WTF), first answered with a confirmation that says how many tasks
it will touch; the confirmed POST acts and redirects back (so reloading the page after
it does not act twice)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import unquote

from flask import Blueprint, abort, flash, redirect, render_template, request, url_for

from ..brokers.connect import open_store
from ..ops import api
from ..ops.browse import TaskFilter, count_matching, matching
from ..ops.when import iso, parse_moment
from ..periodic import manage
from ..periodic.audit import acting
from ..periodic.entry import MAX_NAME_LENGTH, MAX_NOTE_LENGTH
from .context import acting_user, context, problem
from .links import back_to
from .views import BadFilter, filter_from

actions = Blueprint("actions", __name__)

#: What each verb does to a list of task ids, and how the result reads.
PENDING_VERBS = ("cancel", "promote", "reschedule")
DEAD_VERBS = ("resend", "drop")
#: What each verb does to a periodic entry (by name), and how it reads done.
PERIODIC_VERBS: dict[str, tuple[Callable[..., Any], str]] = {
    "pause": (manage.pause, "Paused"),
    "resume": (manage.resume, "Resumed"),
    "run": (manage.run_now, "Sent an extra run of"),
    "remove": (manage.remove, "Removed"),
}
#: The most periodic entries one form may name (each is looked up before it is asked).
PERIODIC_MOST = 100


@actions.before_request
def writable() -> None:
    if context().read_only:
        abort(403, "This dashboard is read-only (--read-only): it shows tasks but changes nothing.")


@dataclass(frozen=True)
class Selection:
    """What a form picked: ticked ids, or everything (that matches), and where to go back
    to; the form itself, to repeat on the confirmation page."""

    ids: list[str]
    everything: bool
    back: str
    form: Any

    @classmethod
    def of(cls, form: Any, back: str) -> Selection:
        ids = list(dict.fromkeys(form.getlist("ids")))
        return cls(ids, form.get("scope") == "all", back, form)

    @property
    def empty(self) -> bool:
        return not self.ids and not self.everything

    @property
    def confirmed(self) -> bool:
        return bool(self.form.get("confirmed") == "yes")

    def confirmation(
        self, verb: str, count: int, eta: datetime | None = None, names: Sequence[str] = ()
    ) -> str:
        """The page that says how many the verb will touch (``names``: which), and
        confirms it."""
        return render_template(
            "confirm.html",
            verb=verb,
            count=count,
            everything=self.everything,
            form=self.form,
            eta=eta,
            back=self.back,
            names=names,
            note_max=MAX_NOTE_LENGTH,
        )


@actions.post("/actions/<verb>")
def act(verb: str) -> Any:
    """A verb on the ticked tasks (``ids``) or on every task the filter matches."""
    if verb not in PENDING_VERBS:
        abort(404)
    picked = Selection.of(request.form, back_to(request.form.get("next")))
    try:
        where = filter_from(picked.form)
        eta = _eta(picked.form.get("eta")) if verb == "reschedule" else None
    except (BadFilter, ValueError) as exc:
        return problem(400, f"Cannot {verb}", str(exc))
    if picked.empty:
        return problem(400, "Nothing selected", "Tick tasks to act on, or act on all that match.")
    ids = picked.ids
    with open_store(context().celery, fail_fast=True) as store:
        if not picked.confirmed:
            count = count_matching(store, where) if picked.everything else len(ids)
            return picked.confirmation(verb, count, eta)
        if picked.everything and verb == "cancel" and _whole_queues(where):
            return _purge(where)
        if picked.everything:
            ids = list(dict.fromkeys(task.id for task in matching(store, where)))
    _report(verb, ids, _perform(verb, ids, eta), eta)
    return redirect(picked.back)


def _report(verb: str, ids: list[str], done: dict[str, int], eta: datetime | None) -> None:
    """Say what an action did, and how many of the tasks were gone already."""
    acted = sum(1 for n in done.values() if n)
    missing = len(ids) - acted
    past = {"cancel": "Cancelled", "promote": "Promoted", "reschedule": "Rescheduled"}[verb]
    message = f"{past} {acted} task{'s' if acted != 1 else ''}"
    if eta is not None:
        message += f" to {iso(eta.timestamp())}"
    if missing:
        message += f"; {missing} no longer pending (already run, moved or cancelled)"
    flash(message + ".", "ok" if not missing else "warn")


def _whole_queues(where: TaskFilter) -> bool:
    """Whether the filter takes every task of its queue(s): then cancelling them all is
    one atomic purge per queue, not a call per task (a million take seconds, not hours)."""
    return where == TaskFilter(queue=where.queue)


def _purge(where: TaskFilter) -> Any:
    app = context().celery
    purged = sum(api.purge(app, None if where.queue is None else [where.queue]).values())
    flash(f"Cancelled {purged} task{'s' if purged != 1 else ''}.", "ok")
    return redirect(back_to(request.form.get("next")))


def _eta(value: str | None) -> datetime:
    if not value or not value.strip():
        raise ValueError("give the new ETA: an ISO 8601 time (UTC if naive) or 15m, 2h, 1d")
    seconds = parse_moment(value)
    try:
        return datetime.fromtimestamp(seconds, timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise ValueError(f"{value!r} is further away than a date can be") from None


def _perform(verb: str, ids: list[str], eta: datetime | None) -> dict[str, int]:
    app = context().celery
    if verb == "cancel":
        return api.cancel_many(app, ids)
    if verb == "promote":
        return api.promote(app, ids)
    assert eta is not None
    return api.reschedule_many(app, ids, eta)


@actions.post("/dead/<verb>")
def act_on_dead(verb: str) -> Any:
    """Send dead letters again (due now) or drop them: the ticked ones, or all."""
    if verb not in DEAD_VERBS:
        abort(404)
    picked = Selection.of(request.form, url_for("pages.dead"))
    if picked.empty:
        return problem(400, "Nothing selected", "Tick the dead letters to act on, or act on all.")
    app = context().celery
    if not picked.confirmed:
        count = len(api.dead_letters(app)) if picked.everything else len(picked.ids)
        return picked.confirmation(verb, count)
    act_on: Callable[..., int] = api.resend_dead if verb == "resend" else api.drop_dead
    done = act_on(app, None if picked.everything else picked.ids)
    did = "Sent again" if verb == "resend" else "Dropped"
    flash(f"{did} {done} dead letter{'s' if done != 1 else ''}.", "ok")
    return redirect(picked.back)


@actions.post("/periodic/<verb>")
def act_on_periodic(verb: str) -> Any:
    """Pause (with the ``note`` the confirmation asks for), resume, run now or remove the
    periodic entries a form names (``ids``: each row's form names its own, URL-quoted,
    since a browser changes a NUL or a line break in a field but never ASCII). A name
    that is no entry's is a 404, and nothing is done."""
    if verb not in PERIODIC_VERBS:
        abort(404)
    picked = Selection.of(request.form, url_for("pages.periodic"))
    if not picked.ids or picked.everything:
        return problem(
            400,
            "Nothing selected",
            "Name the periodic entries to act on: these actions do not take all.",
        )
    if len(picked.ids) > PERIODIC_MOST:
        return problem(400, "Too many entries", f"Name at most {PERIODIC_MOST} at a time.")
    app = context().celery
    names = [unquote(each) for each in picked.ids]
    for name in names:
        if len(name) > MAX_NAME_LENGTH or manage.get(app, name) is None:
            return no_entry(name)
    if not picked.confirmed:
        return picked.confirmation(verb, len(names), names=names)
    _perform_periodic(verb, names, (picked.form.get("note") or "").strip())
    return redirect(picked.back)


def _perform_periodic(verb: str, names: list[str], note: str) -> None:
    """Act on each entry named, and say what was done, which were removed meanwhile, and
    which were refused (an entry whose message cannot be sent is neither resumed nor run;
    a pause note too long is refused)."""
    act, did = PERIODIC_VERBS[verb]
    done, gone, refused = [], [], []
    noted = {"note": note} if verb == "pause" else {}
    with acting(acting_user(), "dashboard"):  # each change recorded as the user's
        for name in names:
            try:
                result = act(context().celery, name, **noted)
            except KeyError:  # removed since it was looked up
                gone.append(repr(name))
            except ValueError as reason:
                refused.append(f"{name!r} ({reason})")
            else:  # remove says False for an entry gone already
                if result is False:
                    gone.append(repr(name))
                else:
                    done.append(repr(name) + (f" (task {result})" if verb == "run" else ""))
    said = [f"{did} periodic {_entries(done)} {', '.join(done)}"] if done else []
    if gone:
        said.append(f"periodic {_entries(gone)} {', '.join(gone)} removed meanwhile")
    if refused:
        said.append(f"refused periodic {_entries(refused)} {', '.join(refused)}")
    text = "; ".join(said)
    flash(text[:1].upper() + text[1:] + ".", "warn" if gone or refused else "ok")


def _entries(names: list[str]) -> str:
    return "entry" if len(names) == 1 else "entries"


def no_entry(name: str) -> tuple[str, int]:
    return problem(
        404,
        "No periodic entry with that name",
        f"No periodic entry is named {name[:MAX_NAME_LENGTH]!r}: it may have been removed.",
    )
