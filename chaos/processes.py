"""The run's processes: chaos's slots (``celery_delayq.testing.slots``), the commands
they run, and the supervisor that starts them again.

Each incarnation's id (``worker-2.3``: third start of worker slot 2) is passed in the
environment and written into every ledger entry, so an execution is tied to the exact
process lifetime it ran in, whatever pids the kernel reuses. A terminal's Ctrl-C
reaches only the orchestrator, which stops the process groups itself; on Linux each
group leader also dies with the orchestrator (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from celery_delayq.testing import MOVER, PRODUCER, LedgerWriter, Slot, celery_command

from .config import ENV_ACKS_LATE, ENV_INCARNATION, ENV_WORKER_MOVER, QUEUE, REPO_ROOT

#: The standalone mover prints this once it runs (it has no Celery signal to hook).
MOVER_READY_LINE = b"standalone mover running"


def chaos_celery(*args: str) -> list[str]:
    """``celery -A chaos.celery_app <args>``."""
    return celery_command("chaos.celery_app", *args)


class ChaosSlot(Slot):
    """A slot whose processes read the run's settings: their incarnation, whether they ack
    late and run a mover thread come in the environment and go into the spawn entry."""

    def __init__(
        self,
        name: str,
        role: str,
        command: Callable[[str], list[str]],
        env: Mapping[str, str],
        run_dir: Path,
        ledger: LedgerWriter,
        acks_late: bool = False,
        worker_mover: bool = True,
    ) -> None:
        super().__init__(name, role, command, env, run_dir, ledger, root=REPO_ROOT)
        self.acks_late = acks_late
        self.worker_mover = worker_mover

    def incarnation_env(self) -> dict[str, str]:
        return {
            ENV_INCARNATION: self.incarnation,
            ENV_ACKS_LATE: "1" if self.acks_late else "0",
            ENV_WORKER_MOVER: "1" if self.worker_mover else "0",
        }

    def spawn_notes(self) -> dict[str, Any]:
        return {"mover": self.worker_mover, "al": self.acks_late}

    def ready(self) -> bool:
        """Started up and serving: a ready file (workers, beat) or the mover's banner."""
        if not self.alive():
            return False
        if self.role == MOVER:
            with contextlib.suppress(OSError):
                return MOVER_READY_LINE in self.log_path.read_bytes()
            return False
        return (self.run_dir / "ready" / self.incarnation).exists()


def worker_command(concurrency: int) -> Callable[[str], list[str]]:
    def command(incarnation: str) -> list[str]:
        return chaos_celery(
            "worker",
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-Q",
            QUEUE,
            "-n",
            f"{incarnation}@chaos",
            "-l",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        )

    return command


def beat_command(run_dir: Path) -> Callable[[str], list[str]]:
    def command(incarnation: str) -> list[str]:
        # A schedule file per incarnation: one left behind by a SIGKILL may be torn.
        schedule = run_dir / f"beat-schedule-{incarnation}"
        return chaos_celery(
            "beat",
            "-S",
            "celery_delayq.beat:Scheduler",
            "-s",
            str(schedule),
            "--pidfile=",
            "-l",
            "WARNING",
        )

    return command


def mover_command(incarnation: str) -> list[str]:
    return chaos_celery("delayq", "mover", "-l", "WARNING")


def producer_command(rate: float, seed: int, last_eta: float) -> Callable[[str], list[str]]:
    def command(incarnation: str) -> list[str]:
        return [sys.executable, "-m", "chaos.producer", str(rate), str(seed), repr(last_eta)]

    return command


class Supervisor:
    """Reaps exited processes and starts them again, in a thread of its own."""

    def __init__(self, slots: list[ChaosSlot], rng: random.Random) -> None:
        self.slots = slots
        self.rng = rng
        self.restarting = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            for slot in self.slots:
                slot.reap(self.rng, restart=self.restarting and slot.role != PRODUCER)
                due = slot.restart_at
                if due is not None and time.monotonic() >= due and self.restarting:
                    with slot.lock:
                        if slot.process is None:
                            slot.start()
