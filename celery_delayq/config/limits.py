"""Which tasks are flow-controlled, and under which limits: the settings
(``delayq_rate_limits``, ``delayq_concurrency_limits``, ``delayq_global_rate_limits``),
the task options (``delayq_rate_limit``, ``delayq_concurrency``) and the per-call limit key
(the ``delayq_limit_key`` header), read into a message's gate (core/layout/gates.py).

A publish asks ``TaskLimits.gate_of`` for every message: a dict lookup, and no Redis call,
for a task without limits.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, MutableMapping
from typing import Any, Protocol

from celery import Celery
from celery.utils.time import rate as celery_rate

from ..core.layout.gates import (
    MOST_KEY_BYTES,
    GateSpec,
    InvalidLimit,
    Rate,
    bucket_of,
    gate_field,
)
from .errors import ConfigurationError

#: The message header naming a call's limit key: each key gets its own bucket.
LIMIT_KEY_HEADER = "delayq_limit_key"
#: The task options of a task's own limits.
RATE_OPTION = "delayq_rate_limit"
CONCURRENCY_OPTION = "delayq_concurrency"
#: The header a message of a concurrency-limited task carries, naming its running slot
#: as ``[queue, bucket]`` (``mark_slot``): its worker renews and gives back the slot
#: (worker/flow/running_slots.py).
SLOT_HEADER = "delayq_slot"
#: Most concurrency one limit may allow.
MOST_CONCURRENCY = 100_000

RateLimits = tuple[tuple[str, tuple[Rate, ...]], ...]
ConcurrencyLimits = tuple[tuple[str, int], ...]


class LimitSettings(Protocol):
    """The settings a ``TaskLimits`` reads (``DelayqConfig``'s; settings.py imports this
    module, not the other way round)."""

    @property
    def rate_limits(self) -> RateLimits: ...
    @property
    def concurrency_limits(self) -> ConcurrencyLimits: ...
    @property
    def global_rate_limits(self) -> bool: ...
    @property
    def concurrency_lease(self) -> float: ...


def read_rates(
    value: object, where: str, error: type[Exception] = ConfigurationError
) -> tuple[Rate, ...]:
    """One task's rate limit(s): a rate, or a list of rates. ``error``: what a bad one
    raises (a setting's ``ConfigurationError``, a task option's ``InvalidLimit``)."""
    texts = value if isinstance(value, (list, tuple)) else [value]
    try:
        rates = tuple(Rate.parse(text) for text in texts)
    except InvalidLimit as exc:
        raise error(f"{where}: {exc}") from None
    if not rates:
        raise error(f"{where}: an empty list of rates")
    return rates


def read_concurrency(value: object, where: str, error: type[Exception] = ConfigurationError) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MOST_CONCURRENCY:
        raise error(
            f"{where}: a concurrency limit is an integer from 1 to {MOST_CONCURRENCY}, "
            f"got {value!r}"
        )
    return value


def _task_names(value: object, setting: str, valid: str) -> Mapping[str, Any]:
    """A limits setting's task names and values; ``valid``: what the setting takes (the
    settings reference's words)."""
    if isinstance(value, tuple):  # read before (a config is made once per app)
        return dict(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
        raise ConfigurationError(f"{setting} must be {valid}, got {value!r}")
    return value


def read_rate_limits(value: object, valid: str) -> RateLimits:
    """``delayq_rate_limits``, checked, as sorted (task name, rates) pairs."""
    names = _task_names(value, "delayq_rate_limits", valid)
    return tuple(
        (name, read_rates(rates, f"delayq_rate_limits[{name!r}]"))
        for name, rates in sorted(names.items())
    )


def read_concurrency_limits(value: object, valid: str) -> ConcurrencyLimits:
    """``delayq_concurrency_limits``, checked, as sorted (task name, most) pairs."""
    names = _task_names(value, "delayq_concurrency_limits", valid)
    return tuple(
        (name, read_concurrency(most, f"delayq_concurrency_limits[{name!r}]"))
        for name, most in sorted(names.items())
    )


def read_limit_key(key: object) -> str:
    """A limit key as its bucket is named by it (``str`` of the header's value);
    ``InvalidLimit`` when it is too long to be part of a key name."""
    text = str(key)
    if len(text.encode("utf-8", "surrogatepass")) > MOST_KEY_BYTES:
        raise InvalidLimit(f"a limit key is at most {MOST_KEY_BYTES} bytes: {text[:40]!r}")
    return text


class TaskLimits:
    """The limits of an app's tasks, each task's read once (settings first, then the
    task's own options)."""

    def __init__(self, app: Celery, config: LimitSettings) -> None:
        self.app = app
        self._rates = dict(config.rate_limits)
        self._concurrency = dict(config.concurrency_limits)
        self._global = config.global_rate_limits
        self._lease_ms = round(config.concurrency_lease * 1000)
        self._specs: dict[str, str | None] = {}

    def spec_of(self, task: str) -> GateSpec:
        """The limits of the task named ``task`` (empty: none); ``InvalidLimit`` for a
        task option that is no limit."""
        found = self.app.tasks.get(task) if self.app.finalized or self.app.autofinalize else None
        rates = self._rates.get(task)
        if rates is None and found is not None:
            own = getattr(found, RATE_OPTION, None)
            if own is None and self._global:
                own = celery_rate_limit(found)
            if own is not None:
                rates = read_rates(own, f"the rate limit of task {task!r}", InvalidLimit)
        most = self._concurrency.get(task)
        if most is None and found is not None:
            own_most = getattr(found, CONCURRENCY_OPTION, None)
            if own_most is not None:
                where = f"the concurrency limit of task {task!r}"
                most = read_concurrency(own_most, where, InvalidLimit)
        return GateSpec(rates or (), most, self._lease_ms)

    def gate_of(self, headers: Mapping[str, Any]) -> bytes | None:
        """The gate of a message with these (protocol 2) headers; None: not limited.
        ``InvalidLimit`` for a limit key on a task without limits, or one too long."""
        task = headers.get("task")
        if not isinstance(task, str):
            return None
        spec = self._specs.get(task, "")
        if spec == "":
            limits = self.spec_of(task)
            spec = self._specs[task] = limits.encode() if limits else None
        key = headers.get(LIMIT_KEY_HEADER)
        if spec is None:
            if key is not None:
                raise InvalidLimit(
                    f"task {task!r} was sent with a limit key ({LIMIT_KEY_HEADER}={key!r}) "
                    "but has no rate or concurrency limit: set one in delayq_rate_limits, "
                    "delayq_concurrency_limits or the task's options"
                )
            return None
        return gate_field(spec, bucket_of(task, None if key is None else read_limit_key(key)))


def celery_rate_limit(task: Any) -> object:
    """A task's own ``rate_limit``, None when Celery reads it as no limit (``0``)."""
    own = getattr(task, "rate_limit", None)
    try:
        return own if own is None or celery_rate(own) else None
    except (ValueError, KeyError, TypeError):  # not Celery's form: Rate.parse tells why
        return own


def mark_slot(headers: Mapping[str, Any], queue: str, gate: bytes | None) -> None:
    """Name the running slot of a message that will take one (its gate holds a
    concurrency limit) in its headers, before its envelope is made; drop a stale name
    (a retry's, say) from any other message. A publish of a task without limits pays
    one dict lookup."""
    if not isinstance(headers, MutableMapping):
        return
    spec, _, bucket = (gate or b"").partition(b" ")
    # the spec read as the release reads it (core/lua/gates.lua), which takes the slot
    limits = None if gate is None else GateSpec.decode(spec.decode("ascii", "replace"))
    if limits is not None and limits.concurrency is not None:
        headers[SLOT_HEADER] = [queue, bucket.decode("utf-8", "surrogatepass")]
    elif SLOT_HEADER in headers:
        del headers[SLOT_HEADER]


_limits: weakref.WeakKeyDictionary[Celery, TaskLimits] = weakref.WeakKeyDictionary()


def limits_of(app: Celery, config: LimitSettings) -> TaskLimits:
    """The app's task limits (one reader per app), with its settings ``config``."""
    limits = _limits.get(app)
    if limits is None:
        limits = _limits[app] = TaskLimits(app, config)
    return limits
