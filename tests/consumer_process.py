"""A kombu consumer in a process of its own, for tests that freeze and kill it.

``python -m tests.consumer_process URL QUEUE ours|stock VISIBILITY``: consumes QUEUE
(ours: through celery-delayq's Redis transport; stock: kombu's own) and prints each
delivery tag it receives, never acknowledging. The test observes it through Redis.
"""

from __future__ import annotations

import socket
import sys
from contextlib import suppress

from kombu import Connection, Consumer, Queue

from celery_delayq.testing import build_app


def connection(url: str, which: str, visibility: float) -> Connection:
    options = {"visibility_timeout": visibility}
    if which == "stock":
        return Connection(url, transport_options=options)
    app = build_app(
        "consumer", {"broker_url": url, "broker_transport_options": options}, current=True
    )
    return app.connection_for_write()


def main() -> None:
    url, queue, which, visibility = sys.argv[1:5]
    with connection(url, which, float(visibility)) as conn:
        channel = conn.default_channel

        def received(body: object, message: object) -> None:
            print(message.delivery_tag, flush=True)  # type: ignore[attr-defined]

        with Consumer(channel, [Queue(queue)], callbacks=[received], accept=["json"]):
            while True:
                with suppress(socket.timeout):
                    conn.drain_events(timeout=1)


if __name__ == "__main__":
    main()
