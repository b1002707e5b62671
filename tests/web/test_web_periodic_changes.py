"""Pause with a note and remove, from the Periodic page (issue 36, section 4), through
Flask's test client against a real Redis; and the form and these actions behind the
dashboard's guards: read-only refuses them and hides them, a post without its CSRF token
or a login changes nothing. The form itself: test_web_periodic_form.py."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone

import pytest
from celery import Celery

from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store
from celery_delayq.periodic import manage
from celery_delayq.periodic.history import EntryHistory
from celery_delayq.web import create_app
from celery_delayq.web.guard.access import Access

from ..helpers import PERIODIC_TASK as TASK
from .test_web import XSS, csrf_token, flashes, page_title
from .test_web_periodic import act

pytestmark = pytest.mark.integration

pytest.importorskip("flask")

#: Every write the Periodic page makes, by the path it posts to, with a form for it.
WRITES = {
    "/periodic/save": {"kind": "interval", "every": "60", "name": "new", "task": TASK},
    "/periodic/remove": {"ids": "tick", "confirmed": "yes"},
    "/periodic/pause": {"ids": "tick", "confirmed": "yes", "note": "why"},
}


def stored(app: Celery) -> list[str]:
    return [f"{info.version} {info.entry.to_json()}" for info in periodic.entries(app)]


def pending(app: Celery) -> list[str]:
    """The entry occurrences written ahead into the store (pending tasks)."""
    with open_store(app) as store:
        return [message.task_id for message in store.pending()]


@pytest.mark.promise("web-periodic-pause-note")
def test_a_pause_keeps_its_note_which_the_list_shows_until_resumed(app, client) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    asked = act(client, "pause", "tick", confirmed=False)
    body = asked.get_data(as_text=True)
    assert page_title(asked) == "Pause 1 periodic entry?"
    assert '<input type="text" name="note" maxlength="500" value="">' in body
    assert periodic.get(app, "tick").entry.enabled  # type: ignore[union-attr]

    note = f"  waiting for the DB migration {XSS}  "
    assert act(client, "pause", "tick", note=note).status_code == 302
    info = periodic.get(app, "tick")
    assert info is not None and not info.entry.enabled and info.entry.note == note.strip()
    page = client.get("/periodic").get_data(as_text=True)
    assert "waiting for the DB migration &lt;script&gt;" in page and XSS not in page
    assert '<q class="note"' in page

    assert act(client, "resume", "tick").status_code == 302
    info = periodic.get(app, "tick")
    assert info is not None and info.entry.enabled and info.entry.note == ""
    assert '<q class="note"' not in client.get("/periodic").get_data(as_text=True)
    assert act(client, "pause", "tick").status_code == 302  # paused again, with no note
    assert periodic.get(app, "tick").entry.note == ""  # type: ignore[union-attr]


def test_a_note_too_long_is_refused_and_the_entry_runs_on(app, client) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    assert act(client, "pause", "tick", note="n" * 501).status_code == 302
    (said,) = flashes(client.get("/periodic"))
    assert said.startswith("Refused periodic entry &#39;tick&#39; (note must be text of at most")
    assert periodic.get(app, "tick").entry.enabled  # type: ignore[union-attr]


@pytest.mark.promise("web-periodic-pause-note")
def test_the_note_is_kept_with_the_entry_across_a_beat_start(app) -> None:
    """A ``beat_schedule`` entry paused with a note: a beat starting keeps both, and an
    entry without a note is stored as before notes existed (older beats read it)."""
    spec = {"tick": {"task": TASK, "schedule": 60.0}}
    now = datetime.now(timezone.utc)
    manage.sync_settings(app, spec, now)
    assert "note" not in json.loads(periodic.get(app, "tick").entry.to_json())  # type: ignore[union-attr]
    periodic.pause(app, "tick", note="held for the audit")
    before = stored(app)
    assert manage.sync_settings(app, spec, now).written == []
    assert stored(app) == before
    changed = {"tick": {**spec["tick"], "schedule": 120.0}}
    assert manage.sync_settings(app, changed, now).written == ["tick"]
    info = periodic.get(app, "tick")
    assert info is not None and not info.entry.enabled
    assert info.entry.note == "held for the audit"


@pytest.mark.promise("web-periodic-remove-confirmed")
def test_remove_asks_first_then_removes_the_entry_and_its_runs_to_come(app, client) -> None:
    periodic.upsert(app, "other", TASK, 60)
    others = sorted(pending(app))
    periodic.upsert(app, "tick", TASK, 60)
    with open_store(app) as store:
        EntryHistory(store.client, store.keys).count("tick", late=2, missed=3)
    written = sorted(pending(app))
    assert len(written) > len(others) > 0  # each one's occurrences, written ahead

    asked = act(client, "remove", "tick", confirmed=False)
    body = asked.get_data(as_text=True)
    assert asked.status_code == 200 and page_title(asked) == "Remove 1 periodic entry?"
    assert "This cannot be undone." in body and 'class="danger">Remove 1</button>' in body
    assert periodic.get(app, "tick") is not None and sorted(pending(app)) == written

    done = act(client, "remove", "tick")
    assert done.status_code == 302 and done.location == "/periodic"
    assert flashes(client.get("/periodic")) == ["Removed periodic entry &#39;tick&#39;."]
    assert periodic.get(app, "tick") is None and periodic.get(app, "other") is not None
    assert sorted(pending(app)) == others  # the other's runs to come, and no more
    periodic.upsert(app, "tick", TASK, 60)  # made again: no history of the one removed
    assert periodic.get(app, "tick").history.late == 0  # type: ignore[union-attr]


def test_remove_of_an_entry_gone_meanwhile_is_a_clear_404(app, client) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    token = csrf_token(client, "/periodic")
    periodic.remove(app, "tick")
    form = {"csrf_token": token, "ids": ["tick"], "confirmed": "yes"}
    answer = client.post("/periodic/remove", data=form)
    assert answer.status_code == 404 and page_title(answer) == "No periodic entry with that name"
    assert stored(app) == []


@pytest.mark.promise(
    "security-web-read-only", "web-read-only-refuses-actions", "web-periodic-form-guarded"
)
def test_read_only_hides_the_form_and_refuses_every_write(app) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    before = stored(app)
    client = create_app(app, read_only=True, access=Access()).test_client()
    page = client.get("/periodic").get_data(as_text=True)
    assert "tick" in page and "New entry</a>" not in page and "/periodic/edit" not in page
    for path in ("/periodic/new", "/periodic/edit?name=tick"):
        assert client.get(path).status_code == 403, path
    token = csrf_token(client, "/login")
    for path, form in WRITES.items():
        answer = client.post(path, data={**form, "csrf_token": token, "do": "save"})
        assert answer.status_code == 403 and "read-only" in answer.get_data(as_text=True), path
    assert stored(app) == before


@pytest.mark.parametrize("path", WRITES)
@pytest.mark.parametrize("token", [None, "forged"])
@pytest.mark.promise("security-web-csrf", "web-actions-need-csrf", "web-periodic-form-guarded")
def test_a_write_without_its_csrf_token_changes_nothing(app, client, path, token) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    before = stored(app)
    form = {**WRITES[path], "do": "save", **({"csrf_token": token} if token else {})}
    answer = client.post(path, data=form)
    assert answer.status_code == 400 and page_title(answer) == "The form could not be checked"
    assert client.get(f"{path}?{'&'.join(f'{k}={v}' for k, v in form.items())}").status_code == 405
    assert stored(app) == before


@pytest.mark.promise("web-periodic-form-guarded")
def test_without_credentials_the_form_and_its_writes_are_refused(app) -> None:
    periodic.upsert(app, "tick", TASK, 60)
    before = stored(app)
    client = create_app(app, access=Access("ops", "pa55word")).test_client()
    for path in ("/periodic/new", "/periodic/edit?name=tick"):
        assert client.get(path).status_code == 401, path
    token = csrf_token(client, "/login")
    for path, form in WRITES.items():
        answer = client.post(path, data={**form, "csrf_token": token, "do": "save"})
        assert answer.status_code == 401, path
    assert stored(app) == before


def test_a_change_is_recorded_as_the_user_who_logged_in_not_one_a_header_names(app) -> None:
    """A token login with a basic-auth header of any name and a wrong password beside it
    (the session lets the request through, unchecked): the change log names the token
    login, never the name the header claims."""
    periodic.upsert(app, "tick", TASK, 60)
    client = create_app(app, access=Access("ops", "pa55word", token="t0ken")).test_client()
    login = {"token": "t0ken", "csrf_token": csrf_token(client, "/login"), "next": "/periodic"}
    assert client.post("/login", data=login).status_code == 302
    for claimed in ("ops:wrong", "root:x"):
        forged = base64.b64encode(claimed.encode()).decode()
        client.environ_base["HTTP_AUTHORIZATION"] = f"Basic {forged}"
        verb = "pause" if periodic.get(app, "tick").entry.enabled else "resume"  # type: ignore[union-attr]
        assert act(client, verb, "tick").status_code == 302
    assert [(each.who, each.via) for each in periodic.changes(app, "tick")][:2] == [
        ("token", "dashboard"),
        ("token", "dashboard"),
    ]
    right = base64.b64encode(b"ops:pa55word").decode()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Basic {right}"
    assert act(client, "pause", "tick").status_code == 302
    assert periodic.changes(app, "tick")[0].who == "ops"  # type: ignore[union-attr]
