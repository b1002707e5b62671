"""Long-running commands: ``mover`` and ``exporter``, each until SIGTERM or SIGINT."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click

from ..brokers.connect import log_startup, mover_thread
from ..config.errors import ConfigurationError
from ..config.settings import config_of
from ..metrics import DEFAULT_PORT, start_exporter
from .render import current_app

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signal() -> Iterator[threading.Event]:
    """An event set by SIGTERM or SIGINT while the block runs; the previous handlers are
    put back after it."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_signalled(server: Any, thread: threading.Thread, started: str) -> None:
    """Say ``started``, wait for SIGTERM or SIGINT, then shut the HTTP server (running
    ``serve_forever`` in ``thread``) down and close it."""
    with stop_on_signal() as stop:
        if not thread.is_alive():
            thread.start()
        click.echo(started, err=True)
        stop.wait()
    server.shutdown()
    thread.join()
    server.server_close()


@click.command()
@click.option(
    "--loglevel",
    "-l",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def mover(loglevel: str) -> None:
    """Run a standalone mover until SIGTERM or SIGINT."""
    logging.basicConfig(level=loglevel.upper(), format="[%(asctime)s: %(levelname)s] %(message)s")
    app = current_app()
    log_startup(app, "this standalone mover moves due messages")
    thread = mover_thread(app, "standalone mover")
    with stop_on_signal() as stop:
        thread.start()
        click.echo("celery-delayq: standalone mover running; stop with SIGTERM or Ctrl-C", err=True)
        stop.wait()
    thread.stop()
    click.echo("celery-delayq: standalone mover stopped", err=True)


@click.command()
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="HTTP port.")
@click.option(
    "--addr",
    help="Address to listen on [default: delayq_metrics_addr, 127.0.0.1: this host only; "
    "0.0.0.0 for every interface].",
)
@click.option(
    "--alive-within",
    type=float,
    help="Seconds since its last heartbeat for a mover to count as alive "
    "[default: 2 * delayq_mover_max_sleep + 5].",
)
def exporter(port: int, addr: str | None, alive_within: float | None) -> None:
    """Serve Prometheus metrics of the delayed store until SIGTERM or SIGINT."""
    app = current_app()
    try:
        addr = addr or config_of(app).metrics_addr
        server, thread = start_exporter(app, port, addr, alive_within=alive_within)
    except (ImportError, OSError, ConfigurationError) as exc:
        raise click.ClickException(str(exc)) from exc
    serve_until_signalled(
        server, thread, f"celery-delayq exporter: serving http://{addr}:{port}/metrics"
    )
    click.echo("celery-delayq exporter: stopped", err=True)
