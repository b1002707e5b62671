"""Where ``celery delayq periodic import`` reads entries from: a file (our JSON export, a
django-celery-beat fixture, a redbeat export, or a ``.py`` module defining
``beat_schedule``), a module by its dotted name, or redbeat's keys in a Redis. Reading
redbeat's keys is redbeat_keys.py's, django-celery-beat's tables through Django
contrib/django_beat_rows.py's."""

from __future__ import annotations

import json
import sys
from datetime import datetime

from celery import Celery

from . import beat_module, django_fixture, own_json, redbeat_keys
from .model import Found


def read_file(app: Celery, path: str, now: datetime) -> list[Found]:
    """The entries of the file at ``path`` (``-``: standard input), by what it holds."""
    if path.endswith(".py"):
        return read_module(app, path, now)
    if path == "-":
        text = sys.stdin.read()
    else:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    document = json.loads(text)
    if own_json.is_ours(document):
        return own_json.read(document)
    if redbeat_keys.is_redbeat(document):
        return redbeat_keys.read_document(app, document, now)
    if django_fixture.is_fixture(document):
        return django_fixture.read(app, django_fixture.fixture_rows(document), now)
    raise ValueError(
        f"{path}: neither our JSON export, a redbeat export nor a django-celery-beat fixture"
    )


def read_module(app: Celery, source: str, now: datetime) -> list[Found]:
    """The ``beat_schedule`` a module defines (a dotted name, or a ``.py`` file)."""
    return beat_module.read(app, beat_module.beat_schedule_of(source), now)
