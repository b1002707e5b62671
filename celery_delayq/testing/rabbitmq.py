"""A RabbitMQ for tests and benchmarks, without depending on a shared server's state.

- With ``RABBITMQ_URL`` set (a node on this host that ``rabbitmqctl`` can reach): a fresh
  vhost on it, deleted at the end.
- Else, with Debian's ``rabbitmq-server`` installed: a private node (its own name, port
  and directories, a config of the caller's choosing, e.g. a short consumer_timeout).
- Else ``RabbitMQUnavailable``, saying how to get one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote, urlparse, urlunparse

import amqp

from .processes import free_port, spawn, stop_group
from .waiting import wait_until

HOW_TO_GET_ONE = (
    "install Debian's rabbitmq-server (apt-get install rabbitmq-server) for a private node, "
    "or set RABBITMQ_URL=amqp://guest:guest@127.0.0.1:5672// for a local server that "
    "rabbitmqctl can manage"
)
SERVER_BINARIES = ("/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server")


class RabbitMQUnavailable(RuntimeError):
    """No RabbitMQ to test against."""


def broker_reachable(url: str) -> bool:
    parts = urlparse(url)
    connection = amqp.Connection(
        f"{parts.hostname}:{parts.port or 5672}",
        userid=parts.username or "guest",
        password=parts.password or "guest",
        virtual_host=(parts.path[1:] or "/") if parts.path not in ("", "/") else "/",
        connect_timeout=2,
    )
    try:
        connection.connect()
    except Exception:  # noqa: BLE001 - not up yet
        return False
    connection.close()
    return True


class RabbitMQNode:
    """A private RabbitMQ node; ``config`` lines go into its rabbitmq.conf, ``advanced``
    (Erlang terms, e.g. ``[{rabbit, [{channel_tick_interval, 1000}]}].``) into its
    advanced.config."""

    def __init__(self, config: Mapping[str, str] | None = None, advanced: str = "[].") -> None:
        self.port = free_port()
        self.name = f"delayq-test-{self.port}@localhost"
        self.dir = Path(tempfile.mkdtemp(prefix="delayq-rabbitmq-"))
        self.config = {"listeners.tcp.default": str(self.port), "loopback_users": "none"}
        self.config.update(config or {})
        self.advanced = advanced
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def start(self, timeout: float = 60.0) -> RabbitMQNode:
        binary = next(filter(None, map(shutil.which, SERVER_BINARIES)), None)
        if binary is None:
            raise RabbitMQUnavailable(f"no rabbitmq-server binary: {HOW_TO_GET_ONE}")
        conf = "".join(f"{key} = {value}\n" for key, value in self.config.items())
        (self.dir / "rabbitmq.conf").write_text(conf)
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "advanced.config").write_text(self.advanced + "\n")
        env = dict(
            os.environ,
            HOME=str(self.dir),  # its own Erlang cookie
            RABBITMQ_NODENAME=self.name,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(free_port()),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(self.dir / "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_PID_FILE=str(self.dir / "pid"),
        )
        self.process = spawn(
            [binary], env, self.dir / "server.out", root=self.dir, die_with_parent=False
        )
        wait_until(
            lambda: broker_reachable(self.url),
            timeout=timeout,
            interval=0.2,
            what=f"the private RabbitMQ node {self.name} accepts connections",
            abort=self._exited,
        )
        return self

    def _exited(self) -> str | None:
        if self.process is None or self.process.poll() is None:
            return None
        return "it exited:\n" + (self.dir / "server.out").read_text(errors="replace")[-3000:]

    def stop(self, keep_data: bool = False) -> None:
        """A clean shutdown (SIGTERM to the node's process group); then its directories
        go, unless ``keep_data`` (to start the same node again: ``restart``)."""
        if self.process is not None:
            stop_group(self.process, timeout=30)
            self.process = None
        if not keep_data:
            shutil.rmtree(self.dir, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start the node again, on the same port with the same data (durable
        queues and persistent messages survive, as on a real server)."""
        self.stop(keep_data=True)
        self.start()


@contextlib.contextmanager
def fresh_vhost(url: str) -> Iterator[str]:
    """A new vhost on the server at ``url`` (through ``rabbitmqctl``); its URL."""
    parts = urlparse(url)
    vhost = f"delayq-test-{uuid.uuid4().hex[:8]}"
    user = parts.username or "guest"
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        raise RabbitMQUnavailable(
            f"RABBITMQ_URL is set but rabbitmqctl is missing: {HOW_TO_GET_ONE}"
        )
    for args in (["add_vhost", vhost], ["set_permissions", "-p", vhost, user, ".*", ".*", ".*"]):
        done = subprocess.run([ctl, *args], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RabbitMQUnavailable(f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip()}")
    try:
        yield urlunparse(parts._replace(path="/" + quote(vhost, safe="")))
    finally:
        subprocess.run([ctl, "delete_vhost", vhost], capture_output=True, timeout=60)


@contextlib.contextmanager
def rabbitmq_for_tests(config: Mapping[str, str] | None = None) -> Iterator[str]:
    """An AMQP URL to test against (see the module docstring). A ``config`` asks for a
    private node, whatever ``RABBITMQ_URL`` says."""
    shared = os.environ.get("RABBITMQ_URL")
    if shared and not config:
        with fresh_vhost(shared) as url:
            yield url
        return
    node = RabbitMQNode(config)
    try:
        yield node.start().url
    finally:
        node.stop()
