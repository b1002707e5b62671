"""What the periodic benchmarks under beat chaos share (``python -m benchmarks.periodic_beats``
and its ``--django`` scenario): one scheduler's side (a worker and its beats, each a
``celery_delayq.testing`` slot, SIGKILLed and started again), the runs its tasks record in
the side's Redis, and the kills, one beat of each side in turn, the sides staggered.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from celery_delayq.testing import BEAT, WORKER, LedgerWriter, RedisServer, Slot, wait_until

from .harness import log
from .processes import REPO_ROOT

#: The Redis list of the runs (one JSON record each), and the set of ready workers' pids.
RUNS_KEY = "periodic:runs"
READY_KEY = "periodic:ready"
#: The header with the epoch second a beat published a task at (schedulers that send no
#: occurrence of their own).
SENT_HEADER = "bench-sent"
#: A beat of each side is killed and started again this often (seconds).
KILL_EVERY = 5.0
#: Seconds the workers go on after the last beat stopped, for the tasks already queued.
DRAIN = 3.0

#: The argv of one incarnation, given its id (``Slot``'s ``command``).
Command = Callable[[str], list[str]]


def stamp_sent(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """A ``before_task_publish`` handler: when the beat sent it (``SENT_HEADER``)."""
    if headers is not None:
        headers.setdefault(SENT_HEADER, time.time())


def slot_time(run: dict[str, Any]) -> float:
    """The occurrence a run stands for (celery-delayq's header), else when it was sent."""
    if run.get("occurrence"):
        return datetime.fromisoformat(run["occurrence"]).timestamp()
    return float(run.get("sent") or run["at"])


@dataclass(frozen=True)
class Window:
    name: str
    start: float
    end: float


class Side:
    """One scheduler's Redis, worker and beats; the beats' kills and restarts are in the
    side's ledger (``celery_delayq.testing.ledger``), the processes' logs beside it."""

    def __init__(
        self,
        key: str,
        label: str,
        server: RedisServer,
        directory: Path,
        env: dict[str, str],
        worker: Command,
        beats: list[Command],
    ) -> None:
        self.key = key
        self.label = label
        self.client = server.client()
        self.directory = directory
        self.env = env
        (directory / "logs").mkdir(parents=True)
        self.ledger = LedgerWriter(directory, "orchestrator")
        self.worker = self.slot("worker", WORKER, worker)
        self.beats = [self.slot(f"beat-{n}", BEAT, beat) for n, beat in enumerate(beats)]
        self.extra: list[Slot] = []
        self.kills = 0
        self.rng = random.Random(0)  # Slot.reap's; nothing restarts on its own here

    def slot(self, name: str, role: str, command: Command) -> Slot:
        """A process of this side: its environment, ledger and logs; stopped with it if it
        is not the worker or a beat."""
        made = Slot(name, role, command, self.env, self.directory, self.ledger, root=REPO_ROOT)
        if role not in (WORKER, BEAT):
            self.extra.append(made)
        return made

    def start_worker(self) -> None:
        self.worker.start()
        wait_until(
            lambda: self.client.scard(READY_KEY),
            timeout=90,
            what=f"the {self.key} worker is ready",
            abort=lambda: None if self.worker.alive() else f"it exited: {self.worker.log_path}",
        )

    def kill(self, beat: Slot) -> None:
        """SIGKILL ``beat`` (if running) and wait until it is gone."""
        process = beat.process
        beat.kill()
        if process is not None:
            process.wait()
        beat.reap(self.rng, restart=False)

    def restart(self, beat: Slot) -> None:
        """A chaos kill: SIGKILL ``beat``, then start it again."""
        self.kills += 1
        self.kill(beat)
        beat.start()

    def all_down(self) -> None:
        for beat in self.beats:
            self.kill(beat)

    def ran(self, entry: str) -> bool:
        return any(run["entry"] == entry for run in self.runs())

    def runs(self) -> list[dict[str, Any]]:
        return [json.loads(raw) for raw in self.client.lrange(RUNS_KEY, 0, -1)]

    def stop(self) -> None:
        for slot in (*self.extra, *self.beats, self.worker):
            slot.stop()


def start_all(sides: list[Side], entry: str) -> None:
    """Each side's worker, then its beats; back once every side ran ``entry``."""
    for side in sides:
        side.start_worker()
    log("workers ready; starting the beats")
    for side in sides:
        for beat in side.beats:
            beat.start()
    wait_until(
        lambda: all(side.ran(entry) for side in sides),
        timeout=120,
        interval=0.2,
        what=f"every side ran {entry}",
    )


def chaos(sides: list[Side], start: float, end: float) -> None:
    """From ``start`` to ``end``: every ``KILL_EVERY`` seconds, one beat of each side, in
    turn, SIGKILLed and started again (the sides' kills staggered across the period)."""
    stagger = KILL_EVERY / len(sides)
    kills = sorted(
        (when, k, n)
        for k in range(len(sides))
        for n in range(1, int((end - start) / KILL_EVERY) + 1)
        for when in (start + n * KILL_EVERY + k * stagger,)
        if when < end
    )
    log(f"chaos: {len(kills)} beat kills over {end - start:g} s")
    for when, k, n in kills:
        sleep_until(when)
        side = sides[k]
        side.restart(side.beats[n % len(side.beats)])
    sleep_until(end)


def sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))
