"""celery-delayq: Celery countdown/ETA tasks that wait in Redis, not in worker memory.

Switch it on in Celery settings::

    broker_transport = "celery_delayq.transport:Transport"
    beat_scheduler = "celery_delayq.beat:Scheduler"      # optional; workers move too

Then ``cancel``, ``reschedule`` and ``backlog`` act on the pending delayed tasks.
"""

from __future__ import annotations

from .api import backlog, cancel, reschedule
from .config import DelayqConfig
from .errors import ConfigurationError, InvalidETA
from .store import QueueBacklog

__version__ = "0.1.0"

__all__ = [
    "ConfigurationError",
    "DelayqConfig",
    "InvalidETA",
    "QueueBacklog",
    "__version__",
    "backlog",
    "cancel",
    "reschedule",
]
