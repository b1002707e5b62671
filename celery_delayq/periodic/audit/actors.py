"""Who is changing periodic entries, and through what: set by each interface around its
calls (the CLI for its command, the dashboard for a request, the admin scheduler for a
sync, a beat for its ``beat_schedule``), read by the registry as it writes a change."""

from __future__ import annotations

import getpass
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

__all__ = ["INTERFACES", "Actor", "acting", "current_actor", "os_user"]

#: Where a change comes from: the Python API, the CLI, the dashboard, the Django admin
#: (django-celery-beat's rows, through the admin scheduler), a beat's ``beat_schedule``.
INTERFACES = ("api", "cli", "dashboard", "admin", "settings")


@dataclass(frozen=True)
class Actor:
    """Who acts (a user name; "" for the OS user of this process), through which
    interface, a detail for the record (django-celery-beat's row change time), and what
    the record calls each change made ("": created, updated, paused... as it is; an
    import's changes are "imported", a clear's removals "cleared")."""

    who: str = ""
    via: str = "api"
    detail: str = ""
    action: str = ""

    def named(self) -> Actor:
        """This actor with a name: the OS user's when none was given."""
        return self if self.who else replace(self, who=os_user())


_ACTOR: ContextVar[Actor] = ContextVar("delayq_periodic_actor", default=Actor())  # noqa: B039 (frozen)


def current_actor() -> Actor:
    """Who acts here and now (by default: this process's OS user, through the API)."""
    return _ACTOR.get().named()


@contextmanager
def acting(
    who: str | None = None,
    via: str | None = None,
    detail: str | None = None,
    action: str | None = None,
) -> Iterator[Actor]:
    """Record the changes made inside as made by ``who`` through ``via`` (each left as
    the enclosing one's when None)."""
    now = _ACTOR.get()
    given = {"who": who, "via": via, "detail": detail, "action": action}
    actor = replace(now, **{key: value for key, value in given.items() if value is not None})
    token = _ACTOR.set(actor)
    try:
        yield actor
    finally:
        _ACTOR.reset(token)


def os_user() -> str:
    """The OS user of this process, or "unknown" (no name for its uid: a container's)."""
    try:
        return getpass.getuser()
    except Exception:  # KeyError, OSError: no passwd entry nor LOGNAME
        return "unknown"
