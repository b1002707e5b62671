"""The run's processes: start them, SIGKILL them, and start them again.

A ``Slot`` is one role (worker 2, beat, the standalone mover, a producer) holding at
most one live process at a time. Each start is a new *incarnation* with an id of its
own (``worker-2.3``: third start of worker slot 2), passed in the environment and
written into every ledger entry, so an execution is tied to the exact process lifetime
it ran in, whatever pids the kernel reuses.

Every process gets a session (process group) of its own: a SIGKILL goes to the whole
group, a prefork worker's pool children included, as when a machine or container
dies. A terminal's Ctrl-C reaches only the orchestrator, which stops the groups itself;
on Linux each group leader also dies with the orchestrator (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from benchmarks.processes import REPO_ROOT
from celery_delayq.testing import celery_command, spawn, stop_group

from .config import ENV_ACKS_LATE, ENV_INCARNATION, ENV_WORKER_MOVER, QUEUE
from .ledger import LedgerWriter

WORKER, BEAT, MOVER, PRODUCER = "worker", "beat", "mover", "producer"
#: Killed or exited processes come back after a random pause in this range (seconds).
RESTART_DELAY = (0.5, 2.0)
#: The standalone mover prints this once it runs (it has no Celery signal to hook).
MOVER_READY_LINE = b"standalone mover running"


def chaos_celery(*args: str) -> list[str]:
    """``celery -A chaos.celery_app <args>``."""
    return celery_command("chaos.celery_app", *args)


class Slot:
    """One supervised role; ``command`` builds the argv of an incarnation from its id."""

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
        self.name = name
        self.role = role
        self.command = command
        self.env = dict(env)
        self.run_dir = run_dir
        self.ledger = ledger
        self.acks_late = acks_late
        self.worker_mover = worker_mover
        self.generation = 0
        self.incarnation = ""
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.killed = False
        self.restart_at: float | None = None
        self.lock = threading.Lock()

    @property
    def log_path(self) -> Path:
        return self.run_dir / "logs" / f"{self.incarnation}.log"

    def start(self) -> None:
        self.generation += 1
        self.incarnation = f"{self.name}.{self.generation}"
        env = {
            **os.environ,
            **self.env,
            ENV_INCARNATION: self.incarnation,
            ENV_ACKS_LATE: "1" if self.acks_late else "0",
            ENV_WORKER_MOVER: "1" if self.worker_mover else "0",
        }
        self.process = spawn(self.command(self.incarnation), env, self.log_path, root=REPO_ROOT)
        self.started_at = time.time()
        self.killed = False
        self.restart_at = None
        self.ledger.write(
            "X",
            ev="spawn",
            mover=self.worker_mover,
            inc=self.incarnation,
            role=self.role,
            al=self.acks_late,
            pid=self.process.pid,
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ready(self) -> bool:
        """Started up and serving: a ready file (workers, beat) or the mover's banner."""
        if not self.alive():
            return False
        if self.role == MOVER:
            with contextlib.suppress(OSError):
                return MOVER_READY_LINE in self.log_path.read_bytes()
            return False
        return (self.run_dir / "ready" / self.incarnation).exists()

    def kill(self) -> str | None:
        """SIGKILL the whole process group; the incarnation killed, or None if not running.

        The kill is in the ledger before the signal is sent, so no execution of this
        incarnation can be recorded after an unrecorded kill.
        """
        with self.lock:
            process = self.process
            if process is None or process.poll() is not None:
                return None
            self.ledger.write("X", ev="kill", inc=self.incarnation, role=self.role)
            self.killed = True
            os.killpg(process.pid, signal.SIGKILL)
            return self.incarnation

    def reap(self, rng: random.Random, restart: bool) -> None:
        """Note an exit (killed, or on its own) and plan the restart."""
        with self.lock:
            process = self.process
            if process is None or process.poll() is None:
                return
            self._ended(process, killed=self.killed)
            if restart:
                self.restart_at = time.monotonic() + rng.uniform(*RESTART_DELAY)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the group (a warm shutdown), then SIGKILL what is left after ``timeout``."""
        with self.lock:
            process, self.restart_at = self.process, None
            if process is None:
                return
            stop_group(process, timeout)
            self._ended(process, killed=False, stopped=True)

    def _ended(self, process: subprocess.Popen[bytes], **note: bool) -> None:
        """Note the exit of ``process`` in the ledger, and SIGKILL what is left of its
        group (orphaned pool children, if any)."""
        self.ledger.write(
            "X", ev="exit", inc=self.incarnation, role=self.role, code=process.returncode, **note
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        self.process = None


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

    def __init__(self, slots: list[Slot], rng: random.Random) -> None:
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
