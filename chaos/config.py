"""What one chaos run is asked to do, and the settings all of its processes share.

The orchestrator decides everything (broker URL, ledger directory, visibility timeout,
the latest ETA anyone may schedule) and hands it to every subprocess as one JSON
environment variable, so producers, workers, beat and movers cannot drift apart.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: The checkout chaos runs from: its processes start there and import chaos from it.
REPO_ROOT = Path(__file__).resolve().parent.parent

ENV_SETTINGS = "CHAOS_SETTINGS"
#: Which process incarnation (``worker-2.3``: slot 2, third start) wrote a ledger entry.
ENV_INCARNATION = "CHAOS_INCARNATION"
#: "1" in workers that run with ``task_acks_late``.
ENV_ACKS_LATE = "CHAOS_ACKS_LATE"
#: "0" in workers that run without a mover thread (``delayq_worker_mover``).
ENV_WORKER_MOVER = "CHAOS_WORKER_MOVER"
#: "1": the transport drops or doubles a few delayed publishes (``--inject-faults``).
ENV_FAULTS = "CHAOS_INJECT_FAULTS"

QUEUE = "chaos"
TRANSPORT = "chaos.transport:Transport"
#: Shortest countdown producers and retries use; the spec's lower end.
MIN_COUNTDOWN = 0.1
#: Longest countdown of a long run ("a few minutes").
MAX_COUNTDOWN = 180.0
#: Every ETA falls at most this long after producing stops, so the drain stays short.
ETA_TAIL = 10.0
#: Seconds kombu's restore lock outlives a worker killed while holding it (or cut off by
#: CLIENT KILL); kombu's default, 300 s, would stop every redelivery for five minutes.
UNACKED_MUTEX_EXPIRE = 10
#: The run's periodic entry: every beat writes it ahead; each occurrence must run, and be
#: sent once (chaos/periodic_check.py).
PERIODIC_ENTRY = "chaos-tick"
PERIODIC_TASK = "chaos.tick"
PERIODIC_EVERY = 1.0
#: Probability of a task planning 0, 1 or 2 retries.
RETRY_WEIGHTS = (0.8, 0.15, 0.05)


def capped_countdown(countdown: float, last_eta: float) -> float:
    """``countdown``, shortened so its ETA is not after ``last_eta`` (epoch seconds), and
    never below the minimum countdown, so every task still goes through the delayed store."""
    return max(MIN_COUNTDOWN, min(countdown, last_eta - time.time()))


@dataclass(frozen=True)
class Minimums:
    """What a run of a given length must reach to count: the issue's targets for 10
    minutes (100,000 tasks, 50 kills, 3 Redis restarts), scaled to the duration."""

    tasks: int
    kills: int
    redis_restarts: int
    #: The periodic entry's runs: half the occurrences of the run (beats start late).
    periodic_runs: int

    @classmethod
    def for_duration(cls, seconds: float) -> Minimums:
        scale = seconds / 600.0
        return cls(
            tasks=int(100_000 * scale),
            kills=max(3, math.floor(50 * scale)),
            redis_restarts=max(1, math.floor(3 * scale)),
            periodic_runs=math.floor(seconds / PERIODIC_EVERY / 2),
        )


@dataclass(frozen=True)
class RunOptions:
    """The command line: how long, how hard, and with which seed."""

    duration: float
    seed: int
    #: Tasks scheduled per second, all producers together.
    rate: float = 200.0
    producers: int = 2
    #: ``task_acks_late`` of each worker; its length is the number of workers.
    acks_late: tuple[bool, ...] = (True, True, False, False)
    #: How many workers run a mover thread (the first ones of each acks_late kind
    #: alternately); every mover wakes on every wake-up, so each costs CPU.
    worker_movers: int = 2
    concurrency: int = 2
    prefetch_multiplier: int = 4
    visibility_timeout: float = 30.0
    #: Seconds between kombu's scans for unacked messages older than the visibility
    #: timeout (``unacked_restore_interval``), so redeliveries come soon after it.
    restore_interval: float = 2.0
    #: Self-check: publishers drop or double a few delayed messages, as a broken store
    #: would, and the run must fail with exactly those blamed on celery-delayq.
    inject_faults: bool = False

    @property
    def max_countdown(self) -> float:
        """Up to a few minutes, but at most half the run, so short runs see their
        tasks come due."""
        return max(1.0, min(MAX_COUNTDOWN, self.duration / 2))

    def worker_mover(self, index: int) -> bool:
        """Whether worker ``index`` runs a mover: workers 0, 2, 4... first (one of each
        acks_late kind with the default split), then 1, 3, 5..."""
        order = list(range(0, len(self.acks_late), 2)) + list(range(1, len(self.acks_late), 2))
        return index in order[: self.worker_movers]

    @property
    def minimums(self) -> Minimums:
        return Minimums.for_duration(self.duration)


@dataclass(frozen=True)
class SharedSettings:
    """Settings every subprocess of one run reads from ``CHAOS_SETTINGS``."""

    broker_url: str
    #: Directory of the append-only ledger files (one per process).
    ledger_dir: str
    #: Directory where workers and beat drop a file named after their incarnation once ready.
    ready_dir: str
    visibility_timeout: float
    restore_interval: float
    max_countdown: float
    prefetch_multiplier: int

    def celery_settings(self, acks_late: bool, worker_mover: bool = True) -> dict[str, Any]:
        """Celery settings of every process; only ``task_acks_late`` and
        ``delayq_worker_mover`` differ between workers."""
        return {
            "broker_url": self.broker_url,
            "broker_transport": TRANSPORT,
            "broker_transport_options": {
                "visibility_timeout": self.visibility_timeout,
                "unacked_restore_interval": self.restore_interval,
                "unacked_restore_throttle": 1,
                "unacked_mutex_expire": UNACKED_MUTEX_EXPIRE,
            },
            "broker_connection_retry_on_startup": True,
            "broker_connection_max_retries": None,
            "task_default_queue": QUEUE,
            "task_ignore_result": True,
            "task_acks_late": acks_late,
            "worker_prefetch_multiplier": self.prefetch_multiplier,
            "worker_enable_remote_control": False,
            "enable_utc": True,
            "timezone": "UTC",
            "beat_schedule": {
                PERIODIC_ENTRY: {"task": PERIODIC_TASK, "schedule": PERIODIC_EVERY},
            },
            # Movers come back within 2 s of an outage instead of backing off to 10 s.
            "delayq_mover_retry_max": 2.0,
            "delayq_worker_mover": worker_mover,
        }

    def to_env(self) -> dict[str, str]:
        return {ENV_SETTINGS: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> SharedSettings:
        try:
            raw = environ[ENV_SETTINGS]
        except KeyError:
            raise RuntimeError(
                f"{ENV_SETTINGS} is not set: this module runs in subprocesses that "
                "`python -m chaos` starts"
            ) from None
        return cls(**json.loads(raw))
