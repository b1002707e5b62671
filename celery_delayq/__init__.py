"""celery-delayq: Celery countdown/ETA tasks that wait in Redis, not in worker memory.

Switch it on in Celery settings::

    broker_transport = "celery_delayq.transport:Transport"
    beat_scheduler = "celery_delayq.beat:Scheduler"      # optional; workers move too

Then ``cancel``, ``reschedule`` and ``backlog`` act on the pending delayed tasks, and
``schedule_many`` sends many delayed tasks at once; ``debounce`` and ``schedule_keyed``
keep one pending message per delay key; ``pause``, ``resume`` and ``throttle`` hold the
releases of a flow-controlled task (or of one of its limit keys) across every worker.

Layers, each importing only those below it: ``core`` (the store; Redis only) ->
``brokers`` (the channels and transports, settings) -> ``scheduling`` (``schedule_many``,
``debounce``) -> ``worker`` (bootstep, hooks, metrics) -> ``transport``, ``beat`` (the
settings paths) -> ``ops`` (API, doctor, rescue) -> ``web`` -> ``cli`` (the ``celery
delayq`` commands); see docs/explanation/design.md's module map.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core.lazy import lazy_attributes

if TYPE_CHECKING:
    from .brokers.common.key_headers import DelayKeyHeld, InvalidDelayKey
    from .config.errors import ConfigurationError, InvalidETA, MessageTooLarge
    from .config.settings import DelayqConfig
    from .core.layout.gates import InvalidLimit
    from .core.results import QueueBacklog
    from .core.store.holds import BucketHold
    from .ops.api import backlog, cancel, promote, reschedule
    from .ops.pause import pause, pause_queue, resume, resume_queue, throttle, throttle_current
    from .scheduling.bulk import BulkScheduleError, schedule_many
    from .scheduling.debounce import KeyedResult, debounce, schedule_keyed

#: Where each public name lives. A name is imported on first use (PEP 562), so a process
#: that only publishes through the transport never loads the operations or bulk modules.
_HOMES = {
    "ConfigurationError": ".config.errors",
    "InvalidETA": ".config.errors",
    "MessageTooLarge": ".config.errors",
    "DelayKeyHeld": ".brokers.common.key_headers",
    "InvalidDelayKey": ".brokers.common.key_headers",
    "DelayqConfig": ".config.settings",
    "InvalidLimit": ".core.layout.gates",
    "QueueBacklog": ".core.results",
    "backlog": ".ops.api",
    "cancel": ".ops.api",
    "promote": ".ops.api",
    "reschedule": ".ops.api",
    "BucketHold": ".core.store.holds",
    "pause": ".ops.pause",
    "pause_queue": ".ops.pause",
    "resume": ".ops.pause",
    "resume_queue": ".ops.pause",
    "throttle": ".ops.pause",
    "throttle_current": ".ops.pause",
    "BulkScheduleError": ".scheduling.bulk",
    "schedule_many": ".scheduling.bulk",
    "KeyedResult": ".scheduling.debounce",
    "debounce": ".scheduling.debounce",
    "schedule_keyed": ".scheduling.debounce",
}


__getattr__ = lazy_attributes(__name__, _HOMES)


__version__ = "0.1.0"

__all__ = [
    "BucketHold",
    "BulkScheduleError",
    "ConfigurationError",
    "DelayKeyHeld",
    "DelayqConfig",
    "InvalidDelayKey",
    "InvalidETA",
    "InvalidLimit",
    "KeyedResult",
    "MessageTooLarge",
    "QueueBacklog",
    "__version__",
    "backlog",
    "cancel",
    "debounce",
    "pause",
    "pause_queue",
    "promote",
    "reschedule",
    "resume",
    "resume_queue",
    "schedule_keyed",
    "schedule_many",
    "throttle",
    "throttle_current",
]
