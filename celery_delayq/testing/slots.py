"""Supervised processes: start them, SIGKILL them, and start them again.

A ``Slot`` is one role (a worker, a beat, a mover, a producer) holding at most one live
process at a time. Each start is a new *incarnation* with an id of its own
(``worker-2.3``: third start of slot ``worker-2``), written into the ledger with every
spawn, kill and exit (``X`` entries: ``ev``, ``inc``, ``role``), so what a process did
is tied to the exact lifetime it ran in, whatever pids the kernel reuses.

Every process is started by ``spawn``, in a session (process group) of its own: a
SIGKILL goes to the whole group, a prefork worker's pool children included, as when a
machine or container dies.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .ledger import LedgerWriter
from .processes import spawn, stop_group

WORKER, BEAT, MOVER, PRODUCER = "worker", "beat", "mover", "producer"
#: Killed or exited processes come back after a random pause in this range (seconds).
RESTART_DELAY = (0.5, 2.0)


class Slot:
    """One supervised role; ``command`` builds the argv of an incarnation from its id.

    Its processes run in ``root`` and import from it (``spawn``'s ``root``), with ``env``
    and ``incarnation_env()``; their output goes to ``<run_dir>/logs/<incarnation>.log``.
    """

    def __init__(
        self,
        name: str,
        role: str,
        command: Callable[[str], list[str]],
        env: Mapping[str, str],
        run_dir: Path,
        ledger: LedgerWriter,
        *,
        root: Path | None = None,
    ) -> None:
        self.name = name
        self.role = role
        self.command = command
        self.env = dict(env)
        self.run_dir = run_dir
        self.ledger = ledger
        self.root = root
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

    def incarnation_env(self) -> dict[str, str]:
        """Environment variables of the incarnation starting (``self.incarnation``) beside
        ``env``: none here, a harness whose processes must know more adds them."""
        return {}

    def spawn_notes(self) -> dict[str, Any]:
        """Fields of the ledger's spawn entry beside ``inc``, ``role`` and ``pid``."""
        return {}

    def start(self) -> None:
        self.generation += 1
        self.incarnation = f"{self.name}.{self.generation}"
        env = {**os.environ, **self.env, **self.incarnation_env()}
        self.process = spawn(self.command(self.incarnation), env, self.log_path, root=self.root)
        self.started_at = time.time()
        self.killed = False
        self.restart_at = None
        self.ledger.write(
            "X",
            ev="spawn",
            inc=self.incarnation,
            role=self.role,
            pid=self.process.pid,
            **self.spawn_notes(),
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

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
