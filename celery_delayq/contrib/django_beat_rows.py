"""django-celery-beat's ``PeriodicTask`` rows with their schedules, read through Django's
ORM, for ``celery delayq periodic import --django-settings mysite.settings``.

Django is set up from the settings module given (unless it is set up already, from the
same one); each row is handed on as plain column values
(periodic/transfer/django_fixture.py reads them as it reads a fixture's). A naive time
(``USE_TZ = False``) is in the site's ``TIME_ZONE``; with
``DJANGO_CELERY_BEAT_TZ_AWARE = False`` a crontab is in the app's time zone, as
django-celery-beat reads it then.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from ..periodic.transfer.django_fixture import KINDS, TaskRow


def task_rows(settings_module: str) -> list[TaskRow]:
    """Every ``PeriodicTask`` row, by name, with its schedule's row."""
    setup(settings_module)
    from django.conf import settings
    from django_celery_beat.models import PeriodicTask

    tz_aware = getattr(settings, "DJANGO_CELERY_BEAT_TZ_AWARE", True)
    rows = []
    for task in PeriodicTask.objects.select_related(*KINDS).order_by("name"):
        kind = next((k for k in KINDS if getattr(task, f"{k}_id") is not None), None)
        schedule = columns(getattr(task, kind)) if kind else {}
        if kind == "crontab" and not tz_aware:
            schedule["timezone"] = None  # the app's
        rows.append(TaskRow(columns(task), kind, schedule))
    return rows


def setup(settings_module: str) -> None:
    """Django set up from ``settings_module``; a ``ValueError`` if it is set up from
    another already (a process has one set of settings)."""
    import django
    from django.conf import settings

    if settings.configured:
        loaded = getattr(settings, "SETTINGS_MODULE", None)
        if loaded not in (None, settings_module):
            raise ValueError(f"Django is set up from {loaded}, not {settings_module}")
    else:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    django.setup()


def columns(row: Any) -> dict[str, Any]:
    """A row's column values (a foreign key as its pk, a time zone by its name, a naive
    time made aware in the site's zone)."""
    from django.utils import timezone

    values: dict[str, Any] = {}
    for field in row._meta.concrete_fields:
        value = field.value_from_object(row)
        if isinstance(value, datetime) and timezone.is_naive(value):
            value = timezone.make_aware(value)
        if value is not None and not isinstance(value, (datetime, int, float, str)):
            value = str(value)  # a latitude's Decimal, a crontab's ZoneInfo
        values[field.name] = value
    return values
