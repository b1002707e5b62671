"""A crawler of the dashboard mounted under a prefix: it follows every link, submits every
form (and its confirmation), follows every redirect, and notes each link, form target or
redirect that leaves the prefix. The mounted tests run it over plain HTTP clients
(werkzeug's, Django's); the browser tests click the same pages in chromium."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin, urlsplit

from celery import Celery

import celery_delayq
from celery_delayq import periodic
from celery_delayq.brokers.connect import open_store

#: The attributes that hold a URL the browser goes to or loads.
URL_ATTRIBUTES = ("href", "src", "action", "formaction")
#: What the crawler types into an empty text field, by its name (a new ETA).
TYPED = {"eta": "1h"}
#: Every action, by the path (below the prefix) its confirmed form posts to.
ACTIONS = {
    "/actions/cancel",
    "/actions/promote",
    "/actions/reschedule",
    "/dead/resend",
    "/dead/drop",
    "/periodic/pause",
    "/periodic/resume",
    "/periodic/run",
    "/periodic/remove",
    "/periodic/save",
}
#: The most pages fetched: the dashboard has a handful, each with a few variants.
MOST_PAGES = 300


@dataclass(frozen=True)
class Answer:
    status: int
    location: str | None
    body: str


#: ``fetch(method, url, fields)``: one request through the client under test.
Fetch = Callable[[str, str, list[tuple[str, str]]], Answer]


@dataclass
class Form:
    method: str
    action: str | None
    fields: list[tuple[str, str]] = field(default_factory=list)
    #: Each submit button: (formaction, name, value).
    buttons: list[tuple[str | None, str | None, str | None]] = field(default_factory=list)


class Page(HTMLParser):
    """The URLs and forms of one page (every checkbox ticked, as a user picking all; the
    radio buttons as checked)."""

    def __init__(self, body: str, typed: dict[str, str] | None = None) -> None:
        super().__init__()
        self.typed = TYPED if typed is None else typed
        self.urls: list[str] = []
        self.links: list[str] = []
        self.forms: list[Form] = []
        self._form: Form | None = None
        self.feed(body)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.urls += [a[name] or "" for name in URL_ATTRIBUTES if name in a]
        if tag == "a" and a.get("href"):
            self.links.append(a["href"] or "")
        if tag == "form":
            self._form = Form((a.get("method") or "get").lower(), a.get("action"))
            self.forms.append(self._form)
        elif self._form is None:
            return
        elif tag == "button" and (a.get("type") or "submit") == "submit":
            self._form.buttons.append((a.get("formaction"), a.get("name"), a.get("value")))
        elif tag == "input" and a.get("name"):
            kind, name, value = a.get("type") or "text", a["name"] or "", a.get("value") or ""
            checked = kind == "radio" and "checked" in a
            if kind in ("hidden", "checkbox") or (kind == "text" and value) or checked:
                self._form.fields.append((name, value))
            elif kind in ("text", "password") and name in self.typed:
                self._form.fields.append((name, self.typed[name]))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._form = None


@dataclass
class Crawl:
    """What a crawl saw: every request, and every URL that left the prefix (with where)."""

    fetch: Fetch
    prefix: str
    typed: dict[str, str] = field(default_factory=lambda: dict(TYPED))
    skip: tuple[str, ...] = ("/logout",)
    requests: list[tuple[str, str, int]] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)
    #: The forms skipped (a logout), for ``release``.
    held: list[tuple[str, Form, tuple[str | None, str | None, str | None]]] = field(
        default_factory=list
    )
    _seen: set[str] = field(default_factory=set)
    _forms: list[tuple[str, Form, tuple[str | None, str | None, str | None]]] = field(
        default_factory=list
    )
    _form_keys: set[tuple[object, ...]] = field(default_factory=set)

    def under(self, url: str, where: str) -> bool:
        if url == self.prefix or url.startswith(self.prefix + "/"):
            return True
        self.strays.append(f"{url!r} on {where}")
        return False

    def request(self, method: str, url: str, fields: list[tuple[str, str]] | None = None) -> Answer:
        """One request, its answer; a redirect's target is checked and followed, and the
        page's links and forms are noted."""
        answer = self.fetch(method, url, fields or [])
        self.requests.append((method.upper(), url, answer.status))
        if answer.location is not None:
            if self.under(answer.location, f"the redirect of {method} {url}"):
                self.request("get", answer.location)
            return answer
        page = Page(answer.body, self.typed)
        for link in page.urls:
            self.under(link, f"{method} {url}")
        if method == "get":  # a POST's form (a confirmation) is submitted by forms()
            self._seen.add(url)
            for form in page.forms:
                self._note(url, form)
        return answer

    def _note(self, url: str, form: Form) -> None:
        for button in form.buttons:
            key = (form.method, form.action, button, tuple(sorted({n for n, _ in form.fields})))
            if key not in self._form_keys:
                self._form_keys.add(key)
                self._forms.append((url, form, button))

    def pages(self, start: str) -> None:
        """Every page reached by links from ``start`` (no form submitted)."""
        queue = [start]
        while queue and len(self._seen) < MOST_PAGES:
            url = urljoin(start, queue.pop(0)).split("#")[0]
            if url in self._seen or not self.under(url, "the crawl"):
                continue
            answer = self.request("get", url)
            if answer.location is None:
                queue += [link for link in Page(answer.body).links if link not in self._seen]

    def forms(self) -> None:
        """Submit every form noted, each submit button in turn; a confirmation page that
        comes back is confirmed (its form submitted), as a user would."""
        while self._forms:
            self.submit_next()

    def submit_next(self) -> None:
        """Submit the next form noted (one that acts on all, last)."""
        ticked = [n for n, (_, f, b) in enumerate(self._forms) if not _all(f, b)]
        url, form, (formaction, name, value) = self._forms.pop(ticked[0] if ticked else 0)
        target = urljoin(url, formaction or form.action or url)
        if any(target.split("?")[0].endswith(end) for end in self.skip):
            self.held.append((url, form, (formaction, name, value)))
            return
        fields = [*form.fields, *([(name, value or "")] if name else [])]
        if form.method == "get":
            self.request("get", f"{target.split('?')[0]}?{urlencode(fields)}")
            return
        answer = self.request("post", target, fields)
        page = Page(answer.body, self.typed)
        confirmation = [f for f in page.forms if ("confirmed", "yes") in f.fields]
        if answer.location is None and answer.status == 200 and confirmation:
            (confirm,) = confirmation
            self.request("post", urljoin(target, confirm.action or target), confirm.fields)

    def release(self) -> None:
        """Submit the forms skipped so far (the logout, last)."""
        self.skip, self._forms, self.held = (), self.held, []
        self.forms()

    def posted(self, status: int = 302) -> set[str]:
        """The paths (of the prefix) a POST answered with ``status``."""
        return {
            urlsplit(url).path
            for method, url, got in self.requests
            if (method, got) == ("POST", status)
        }


def _all(form: Form, button: tuple[str | None, str | None, str | None]) -> bool:
    """Whether a form acts on all that match, or removes a periodic entry (it empties the
    page of the others): those go last."""
    removes = (button[0] or form.action or "").endswith("/periodic/remove")
    return removes or ("scope", "all") in [*form.fields, button[1:]]


def dead_letter(app: Celery, task_id: str) -> None:
    """Make the pending task ``task_id`` a dead letter, as a broker that kept refusing it
    leaves it: due already (no mover may run meanwhile)."""
    assert celery_delayq.reschedule(app, task_id, countdown=-1) == 1
    with open_store(app) as store:
        (message,) = store.find(task_id)
        store.cancel(task_id)
        store.add_dead_letter(message.queue, message.key, message.record, "refused (a test)")


def stocked(app: Celery, task: str) -> None:
    """Pending tasks of ``task``, a dead letter and a periodic entry: every page has its
    forms."""
    for n in range(3):
        app.send_task(task, (n,), countdown=600)
    dead_letter(app, app.send_task(task, ("dead",), countdown=600).id)
    with warnings.catch_warnings():  # a task of the workers', maybe not of this app
        warnings.simplefilter("ignore", periodic.UnknownTaskWarning)
        periodic.upsert(app, "tick", task, 3600)
