"""``celery delayq web``: serve the web dashboard (celery_delayq/web)."""

from __future__ import annotations

import threading

import click

from .render import current_app
from .run import serve_until_signalled

DEFAULT_PORT = 5557


@click.command()
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="HTTP port.")
@click.option(
    "--address",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; any but a loopback one needs authentication configured "
    "(delayq_web_username/password or delayq_web_token, or DELAYQ_WEB_* variables).",
)
@click.option("--read-only", is_flag=True, help="Show tasks; refuse every action.")
def web(port: int, address: str, read_only: bool) -> None:
    """Serve the web dashboard until SIGTERM or SIGINT."""
    try:
        from ..web.app import make_web_server
        from ..web.guard.access import AddressRefused
    except ImportError as exc:
        raise click.ClickException(
            f"the web dashboard needs Flask ({exc}): pip install 'celery-delayq[web]'"
        ) from exc
    app = current_app()
    try:
        server = make_web_server(app, address, port, read_only=read_only)
    except (AddressRefused, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    thread = threading.Thread(target=server.serve_forever, name="delayq-web", daemon=True)
    mode = " (read-only)" if read_only else ""
    serve_until_signalled(
        server, thread, f"celery-delayq web: serving http://{address}:{port}/{mode}"
    )
    click.echo("celery-delayq web: stopped", err=True)
