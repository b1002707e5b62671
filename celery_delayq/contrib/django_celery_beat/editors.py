"""Who changed a django-celery-beat row, for the entry's change log (periodic/audit/).

The rows keep no editor, only ``date_changed``. When ``django.contrib.admin`` is installed,
its log (``LogEntry``, written by each save through the admin) names the user whose save
of the row is the latest, if it is not older than the row's last change and that change
is not in the entry's change log already; otherwise (a save by code, a schedule edited
rather than the row) the change is the "admin"'s. Read only for a row whose entry is
written, so a sync of unchanged rows queries nothing more.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime

from django.apps import apps
from django.db import DatabaseError
from django_celery_beat.models import PeriodicTask

__all__ = ["row_editor"]

logger = logging.getLogger(__name__)


def row_editor(row: PeriodicTask, recorded: Collection[str] = ()) -> tuple[str, str]:
    """Who made the change of ``row`` synced now (the admin user, else "admin"), and the
    change's detail. ``recorded``: the details of the entry's records made through the
    admin; a save of the row among them was synced already, so this change comes from
    elsewhere (a schedule edited, not the row) and is no user's known."""
    changed: datetime | None = getattr(row, "date_changed", None)
    saved = f"row {row.pk}" + (f" changed {changed.isoformat()}" if changed else "")
    new = changed is not None and not any(each.startswith(saved) for each in recorded)
    user = _admin_user(row, changed) if new and changed is not None else None
    return user or "admin", saved + ("" if user else " (no admin user known)")


def _admin_user(row: PeriodicTask, changed: datetime) -> str | None:
    """The user of the admin's latest log entry of ``row`` since ``changed``, if any."""
    if not apps.is_installed("django.contrib.admin"):
        return None
    from django.contrib.admin.models import LogEntry
    from django.contrib.contenttypes.models import ContentType

    try:
        kind = ContentType.objects.get_for_model(PeriodicTask)
        last = (
            LogEntry.objects.filter(
                content_type=kind, object_id=str(row.pk), action_time__gte=changed
            )
            .select_related("user")
            .order_by("-action_time")
            .first()
        )
        return None if last is None else str(last.user.get_username())
    except DatabaseError as exc:  # the admin's tables missing (not migrated): no name
        logger.warning("the Django admin's log cannot be read: %s", exc)
        return None
