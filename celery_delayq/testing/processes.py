"""The one way the tests, the benchmarks, the chaos harness and the demo start and stop
subprocesses (Celery workers, beat, movers, servers).

``spawn`` starts a command with its output in a log file (or a pipe to read), in a
session of its own by default (so its whole process group, a prefork worker's pool
children included, can be signalled, and a terminal's Ctrl-C reaches only the caller,
which stops it deliberately) and, on Linux, SIGKILLed if the caller dies abruptly, so
no process outlives a crashed or killed run. ``stop_group`` ends such a group.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def celery_command(app: str, *args: str) -> list[str]:
    """``celery -A <app> <args>`` with this interpreter."""
    return [sys.executable, "-m", "celery", "-A", app, *args]


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL it when the caller exits."""
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    *,
    root: Path | None = None,
    session: bool = True,
    die_with_parent: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``command``, stdout and stderr both in ``log_path`` (None: a pipe, read
    from ``process.stdout``), stdin empty.

    ``root``: the directory it runs in and imports from (put first on ``PYTHONPATH``).
    ``session``: in a session of its own; ``die_with_parent``: SIGKILLed when this
    process dies (Linux).
    """
    env = dict(os.environ if env is None else env)
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    with contextlib.ExitStack() as files:
        output = subprocess.PIPE if log_path is None else files.enter_context(log_path.open("wb"))
        return subprocess.Popen(
            list(command),
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=session,
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 - prctl only
        )


def stop_group(process: subprocess.Popen[bytes], timeout: float) -> int:
    """SIGTERM the process group of ``process`` (a ``spawn`` of its own session), then
    SIGKILL it if still alive after ``timeout`` seconds (or on Ctrl-C meanwhile); its
    exit status. The group is signalled only while its leader is unreaped, so its id
    cannot have been reused by an unrelated process."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            return process.wait(timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return process.wait()


def exit_on_termination() -> None:
    """SIGTERM and SIGHUP raise SystemExit(128 + signal), which unwinds through the
    finally blocks that stop workers, Redis and RabbitMQ nodes."""

    def raise_exit(signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)
    signal.signal(signal.SIGHUP, raise_exit)
