"""A limit key taken from an argument: ``@app.task(delayq_limit_key="customer_id")`` gives
each value of the task's ``customer_id`` argument its own bucket (config/limits.py), as if
every call were sent with ``headers={"delayq_limit_key": str(customer_id)}``.

A ``before_task_publish`` receiver sets the header from the call's arguments (by name, or
by position through the task's signature). It is connected only once a process's app
declares the option on some task: while that signal has receivers, bulk scheduling cannot
reuse one message template for many calls (scheduling/templates.py). The check runs when
a transport is built, which ``send_task`` does before it sends the signal, and when a
worker starts.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

from celery import Celery, signals
from celery._state import _get_active_apps

from ...config.limits import LIMIT_KEY_HEADER
from .diverter import uses_delayq

#: The task option naming the argument whose value is a call's limit key (as the header).
ARGUMENT_OPTION = LIMIT_KEY_HEADER


class ArgumentKey(NamedTuple):
    """Where a task's limit key is among its call's arguments."""

    name: str  # the keyword
    position: int | None  # its index among the positional arguments, if it can be one


def argument_key_of(task: Any) -> ArgumentKey | None:
    """The argument a task's option names, or None (no option, or not a string)."""
    name = getattr(task, ARGUMENT_OPTION, None)
    if not isinstance(name, str) or not name:
        return None
    try:
        parameters = list(inspect.signature(task.run).parameters.values())
    except (TypeError, ValueError):  # no signature to read: by keyword only
        return ArgumentKey(name, None)
    positional = [
        each.name
        for each in parameters
        if each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)
    ]
    return ArgumentKey(name, positional.index(name) if name in positional else None)


def limit_key_of(found: ArgumentKey, args: object, kwargs: object) -> str | None:
    """A call's limit key: the argument's value as text; None (the task's own bucket)
    when the call leaves it out or passes None."""
    value = None
    if isinstance(kwargs, Mapping) and found.name in kwargs:
        value = kwargs[found.name]
    elif found.position is not None and isinstance(args, (list, tuple)):
        value = args[found.position] if found.position < len(args) else None
    return None if value is None else str(value)


#: Task name -> where its limit key is (None: the task declares none), filled on demand
#: for the apps' own tasks only (a name sent by ``send_task`` alone is looked up each time,
#: so crafted names cannot grow it).
_argument_keys: dict[str, ArgumentKey | None] = {}


def _delayq_apps() -> list[Celery]:
    return [
        app
        for app in list(_get_active_apps())
        if (app.finalized or app.autofinalize) and uses_delayq(app)
    ]


def _argument_key_named(task_name: str) -> ArgumentKey | None:
    if task_name in _argument_keys:
        return _argument_keys[task_name]
    task = next(filter(None, (app.tasks.get(task_name) for app in _delayq_apps())), None)
    if task is None:
        return None
    found = _argument_keys[task_name] = argument_key_of(task)
    return found


def set_limit_key(sender: Any = None, body: Any = None, headers: Any = None, **_: Any) -> None:
    """``before_task_publish``: the limit key header of a call of a task that takes it
    from an argument (a header the caller set is kept)."""
    if not isinstance(sender, str) or not isinstance(headers, dict):
        return
    if headers.get(LIMIT_KEY_HEADER) is not None:
        return
    found = _argument_key_named(sender)
    if found is None:
        return
    if isinstance(body, (list, tuple)) and len(body) >= 2:  # protocol 2: args, kwargs, embed
        args, kwargs = body[0], body[1]
    elif isinstance(body, Mapping):  # protocol 1
        args, kwargs = body.get("args"), body.get("kwargs")
    else:
        return
    key = limit_key_of(found, args, kwargs)
    if key is not None:
        headers[LIMIT_KEY_HEADER] = key


#: The ``dispatch_uid`` ``set_limit_key`` is connected under.
RECEIVER_UID = "celery_delayq.limit_keys"


def takes_argument_keys(app: Celery) -> bool:
    """Whether a task of ``app`` takes its limit key from an argument."""
    return any(argument_key_of(task) for task in list(app.tasks.values()))


def watch_limit_keys() -> None:
    """Connect ``set_limit_key`` if a celery-delayq app of this process has a task that
    takes its limit key from an argument (once connected, it stays)."""
    if _connected.is_set():
        return
    for app in _delayq_apps():
        if takes_argument_keys(app):
            signals.before_task_publish.connect(
                set_limit_key, weak=False, dispatch_uid=RECEIVER_UID
            )
            _connected.set()
            return


#: Set once ``set_limit_key`` is connected.
_connected = threading.Event()
