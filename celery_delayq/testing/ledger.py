"""A ledger: every process appends JSON lines to a file of its own, outside Redis.

Kept off the Redis under test (the chaos harness's and the periodic benchmark's), so
restarting or pausing that Redis cannot lose a single entry. Each line is written with
one ``write(2)`` on an ``O_APPEND`` file descriptor and no user-space buffer: once
``write`` returns the line is in the kernel's page cache, so a SIGKILL a moment later
loses nothing. Pool children of a prefork worker notice the fork (a new pid) and open a
file of their own.

- ``LedgerWriter``: appends ``{"k": kind, "t": epoch seconds, **fields}`` lines.
- ``LedgerReader``: reads every file of a ledger incrementally, to follow a run live.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class LedgerWriter:
    """Appends events to ``<directory>/<name>-<pid>.jsonl``."""

    def __init__(self, directory: str | Path, name: str) -> None:
        self.directory = Path(directory)
        self.name = name
        self._pid = -1
        self._fd = -1

    def write(self, kind: str, **fields: Any) -> None:
        if os.getpid() != self._pid:
            self._open()
        entry = {"k": kind, "t": time.time(), **fields}
        os.write(self._fd, (json.dumps(entry, separators=(",", ":")) + "\n").encode())

    def _open(self) -> None:
        self._pid = os.getpid()
        path = self.directory / f"{self.name}-{self._pid}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


class LedgerReader:
    """Reads all ledger files of a run incrementally: each ``poll`` returns only the
    lines completed since the last one, so the orchestrator can follow a run live."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._offsets: dict[Path, int] = {}
        #: Lines that were not valid JSON (a writer killed mid-line, in theory).
        self.unreadable = 0

    def poll(self) -> list[Event]:
        return list(self._new_events())

    def _new_events(self) -> Iterator[Event]:
        for path in sorted(self.directory.glob("*.jsonl")):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for next time
            self._offsets[path] = offset + end
            for line in data[:end].splitlines():
                try:
                    yield json.loads(line)
                except ValueError:
                    self.unreadable += 1

    def torn_tails(self) -> int:
        """Files ending in an incomplete line (call after every writer has stopped)."""
        return sum(1 for path, offset in self._offsets.items() if path.stat().st_size > offset)
