"""Who changed a periodic entry, when, from where, and what changed: each entry's change
log in the store (changelog.py), and who is acting in this process (actors.py)."""

from __future__ import annotations

from .actors import Actor, acting, current_actor
from .changelog import MAX_AGE, MAX_CHANGES, ChangeLog, ChangeRecord, UnreadableRecord, changes

__all__ = [
    "MAX_AGE",
    "MAX_CHANGES",
    "Actor",
    "ChangeLog",
    "ChangeRecord",
    "UnreadableRecord",
    "acting",
    "changes",
    "current_actor",
]
