"""The Django admin used as a person uses it, through Django's test ``Client``: a staff user
signs in, opens a change form, changes some fields and saves it; the form is posted with
every value the page holds, as a browser posts it."""

from __future__ import annotations

from collections.abc import Mapping
from html.parser import HTMLParser
from typing import Any

from django.contrib.auth import get_user_model
from django.test import Client

#: The admin pages of django-celery-beat's periodic tasks.
TASKS = "/admin/django_celery_beat/periodictask/"


def staff_client(username: str = "admin") -> Client:
    """A client signed in, through the admin's login form, as a new superuser."""
    get_user_model().objects.create_superuser(username, "admin@example.com", "a-long-Secret-9876")
    client = Client()
    page = client.get("/admin/login/")
    answer = client.post(
        "/admin/login/",
        {
            **FormValues.of(page.content.decode()),
            "username": username,
            "password": "a-long-Secret-9876",
        },
    )
    assert answer.status_code == 302, answer.content.decode()[:2000]
    return client


def change(client: Client, pk: int, **changes: Any) -> None:
    """Open the change form of periodic task ``pk``, set ``changes`` (a checkbox: True or
    False) and save it; fails unless the admin accepted it."""
    url = f"{TASKS}{pk}/change/"
    values = FormValues.of(client.get(url).content.decode())
    for name, value in changes.items():
        if value is False:
            values.pop(name, None)  # an unticked box is not posted
        else:
            values[name] = "on" if value is True else str(value)
    answer = client.post(url, {**values, "_save": "Save"})
    assert answer.status_code == 302, _errors(answer.content.decode())


def delete(client: Client, pk: int) -> None:
    """Delete periodic task ``pk`` through the admin's confirmation page."""
    url = f"{TASKS}{pk}/delete/"
    values = FormValues.of(client.get(url).content.decode())
    answer = client.post(url, {**values, "post": "yes"})
    assert answer.status_code == 302, _errors(answer.content.decode())


class FormValues(HTMLParser):
    """What a browser would post from the page's form: its inputs, ticked boxes, the
    options selected and its text areas."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self._select: str | None = None
        self._textarea: str | None = None

    @classmethod
    def of(cls, page: str) -> dict[str, str]:
        parser = cls()
        parser.feed(page)
        return parser.values

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found: Mapping[str, str | None] = dict(attrs)
        name = found.get("name")
        if tag == "input" and name and found.get("type") not in ("submit", "button"):
            if found.get("type") in ("checkbox", "radio") and "checked" not in found:
                return
            self.values[name] = found.get("value") or ("on" if "checked" in found else "")
        elif tag == "select" and name:
            self._select = name
            self.values.setdefault(name, "")
        elif tag == "option" and self._select and "selected" in found:
            self.values[self._select] = found.get("value") or ""
        elif tag == "textarea" and name:
            self._textarea = name
            self.values[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data: str) -> None:
        if self._textarea is not None:
            text = self.values[self._textarea]
            if not text and data.startswith("\n"):  # the newline after <textarea> is markup
                data = data[1:]
            self.values[self._textarea] = text + data


def _errors(page: str) -> str:
    """The admin's error list on a page it refused, else the page's start."""
    start = page.find("errornote")
    return page[start - 20 : start + 2000] if start >= 0 else page[:2000]
