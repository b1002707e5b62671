"""Problem sizes: the full run (about 10 minutes on 2 cores) and the --quick smoke run."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    #: Scenario 1: backlogs of countdown=3600 tasks at which the worker's RSS is read;
    #: vanilla stops at ``memory_vanilla_max`` (it receives ~2k tasks/s and holds ~9 KB each).
    memory_backlogs: tuple[int, ...]
    memory_vanilla_max: int
    #: Scenario 2: tasks whose countdown exceeds the broker's visibility timeout.
    duplicate_tasks: int
    duplicate_countdown: float
    visibility_timeout: float
    #: Scenario 3: tasks with countdowns spread uniformly over the range, idle worker.
    lateness_tasks: int
    lateness_countdowns: tuple[float, float]
    #: Scenario 3b: tasks/s falling due, for how many seconds.
    stream_rate: float
    stream_window: float
    #: Scenario 3d: tasks due in the same instant on two solo workers, rounds of them.
    together_tasks: int
    together_rounds: int
    #: Scenario 3e: sizes of a hot instant (tasks published with one ETA), seconds from
    #: publishing to that ETA, rounds per side (alternating).
    hot_instant_sizes: tuple[int, ...]
    hot_instant_lead: float
    hot_instant_rounds: int
    #: Scenarios 3c/4: messages due in the same instant, one mover; batch sizes to try (500 first).
    burst_messages: int
    burst_batch_sizes: tuple[int, ...]
    #: Scenario 5: apply_async calls per round; schedule.lua calls without Celery.
    producer_tasks: int
    producer_script_calls: int
    #: Scenario 6: (payload bytes, messages) whose Redis memory is read.
    store_cost_sizes: tuple[tuple[int, int], ...]
    #: Scenario 7: due messages drained by 1, 2 and 4 movers.
    scaleout_messages: int
    #: Scenario 8: acks_late tasks running longer than the visibility timeout (seconds),
    #: the timeout, and how long each task runs.
    long_tasks: int = 4
    long_task_visibility: float = 3.0
    long_task_seconds: float = 10.0
    #: Scenario 9: tiny tasks queued before one worker consumes them.
    consume_tasks: int = 100_000
    #: Scenario 10: acks_late tasks a killed worker held; vanilla's visibility_timeout
    #: (None: kombu's default) and both sides' unacked_restore_interval (None: default).
    recovery_held: int = 4
    recovery_vanilla_visibility: float | None = None
    recovery_delayq_visibility: float = 60.0
    recovery_restore_interval: float | None = None
    #: Scenarios left out of this profile (the quick run keeps CI under a minute).
    skip: tuple[str, ...] = ()


FULL = Profile(
    name="full",
    memory_backlogs=(1_000, 10_000, 100_000),
    memory_vanilla_max=100_000,
    duplicate_tasks=50,
    duplicate_countdown=15.0,
    visibility_timeout=5.0,
    lateness_tasks=500,
    lateness_countdowns=(1.0, 10.0),
    stream_rate=1_000.0,
    stream_window=30.0,
    together_tasks=50,
    together_rounds=10,
    hot_instant_sizes=(50, 5000),
    hot_instant_lead=15.0,
    hot_instant_rounds=2,
    burst_messages=100_000,
    burst_batch_sizes=(500, 1000),
    producer_tasks=5_000,
    producer_script_calls=50_000,
    store_cost_sizes=((100, 200_000), (10_000, 20_000)),
    scaleout_messages=1_000_000,
)

QUICK = Profile(
    name="quick",
    memory_backlogs=(1_000, 5_000),
    memory_vanilla_max=1_000,
    duplicate_tasks=10,
    duplicate_countdown=2.5,
    visibility_timeout=1.25,
    lateness_tasks=50,
    lateness_countdowns=(0.5, 2.0),
    stream_rate=200.0,
    stream_window=2.0,
    together_tasks=50,
    together_rounds=1,
    hot_instant_sizes=(50,),
    hot_instant_lead=3.0,
    hot_instant_rounds=1,
    burst_messages=3_000,
    burst_batch_sizes=(500,),
    producer_tasks=500,
    producer_script_calls=5_000,
    store_cost_sizes=((100, 5_000), (10_000, 500)),
    scaleout_messages=20_000,
    long_tasks=1,
    long_task_seconds=5.0,
    consume_tasks=2_000,
    recovery_vanilla_visibility=3.0,
    recovery_delayq_visibility=3.0,
    recovery_restore_interval=1.0,
    skip=("lateness",),  # the idle-worker case; "stream" covers the same path under load
)
