"""What the pages change: cancel, promote and reschedule pending tasks, send dead letters
again or drop them. Every action is a POST (CSRF-checked by Flask-WTF), first answered
with a confirmation that says how many tasks it will touch; the confirmed POST acts and
redirects back (so reloading the page after it does not act twice)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from flask import Blueprint, abort, flash, redirect, render_template, request

from ..celery.connect import open_store
from ..ops import api
from ..ops.browse import count_matching, matching
from ..ops.when import iso, parse_moment
from .context import context, problem
from .views import BadFilter, filter_from, safe_next

actions = Blueprint("actions", __name__)

#: What each verb does to a list of task ids, and how the result reads.
PENDING_VERBS = ("cancel", "promote", "reschedule")
DEAD_VERBS = ("resend", "drop")


@actions.before_request
def writable() -> None:
    if context().read_only:
        abort(403, "This dashboard is read-only (--read-only): it shows tasks but changes nothing.")


@actions.post("/actions/<verb>")
def act(verb: str) -> Any:
    """A verb on the ticked tasks (``ids``) or on every task the filter matches."""
    if verb not in PENDING_VERBS:
        abort(404)
    form = request.form
    ids = form.getlist("ids")
    everything = form.get("scope") == "all"
    try:
        where = filter_from(form)
        eta = _eta(form.get("eta")) if verb == "reschedule" else None
    except (BadFilter, ValueError) as exc:
        return problem(400, f"Cannot {verb}", str(exc))
    if not ids and not everything:
        return problem(
            400, "Nothing selected", "Tick the tasks to act on, or act on all that match."
        )
    app = context().celery
    if form.get("confirmed") != "yes":
        with open_store(app, fail_fast=True) as store:
            count = count_matching(store, where) if everything else len(set(ids))
        back = request.script_root + safe_next(form.get("next"))
        return render_template(
            "confirm.html",
            verb=verb,
            count=count,
            everything=everything,
            form=form,
            eta=eta,
            back=back,
        )
    if everything:
        with open_store(app, fail_fast=True) as store:
            ids = [task.id for task in matching(store, where)]
    ids = list(dict.fromkeys(ids))
    done = _perform(verb, ids, eta)
    acted = sum(1 for n in done.values() if n)
    missing = len(ids) - acted
    past = {"cancel": "Cancelled", "promote": "Promoted", "reschedule": "Rescheduled"}[verb]
    message = f"{past} {acted} task{'s' if acted != 1 else ''}"
    if verb == "reschedule" and eta is not None:
        message += f" to {iso(eta.timestamp())}"
    if missing:
        message += f"; {missing} no longer pending (already run, moved or cancelled)"
    flash(message + ".", "ok" if not missing else "warn")
    return redirect(request.script_root + safe_next(form.get("next")))


def _eta(value: str | None) -> datetime:
    if not value or not value.strip():
        raise ValueError("give the new ETA: an ISO 8601 time (UTC if naive) or 15m, 2h, 1d")
    return datetime.fromtimestamp(parse_moment(value), timezone.utc)


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
    form = request.form
    ids = form.getlist("ids")
    everything = form.get("scope") == "all"
    if not ids and not everything:
        return problem(400, "Nothing selected", "Tick the dead letters to act on, or act on all.")
    app = context().celery
    if form.get("confirmed") != "yes":
        count = len(api.dead_letters(app)) if everything else len(set(ids))
        back = request.script_root + "/dead"
        return render_template(
            "confirm.html",
            verb=verb,
            count=count,
            everything=everything,
            form=form,
            eta=None,
            back=back,
        )
    act_on: Callable[..., int] = api.resend_dead if verb == "resend" else api.drop_dead
    done = act_on(app, None if everything else ids)
    did = "Sent again" if verb == "resend" else "Dropped"
    flash(f"{did} {done} dead letter{'s' if done != 1 else ''}.", "ok")
    return redirect(request.script_root + "/dead")
