"""A TCP proxy in front of a server whose answers can be cut off: while muted, the
server's bytes are read and dropped instead of reaching the clients, and every socket
stays open, as with a broker (or a network path) that accepts a connection and then
stops answering. What the clients send still reaches the server. The answers can also be
held back a while each (``delay``), as by a slow network path."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType
from urllib.parse import urlparse, urlunparse


class MutingProxy:
    """Forwards each connection made to ``port`` to ``upstream`` (host, port), a
    thread per direction; ``accepted`` counts the connections made through it."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.muted = False
        #: Seconds each read of the server's answers is held before it is passed on.
        self.delay = 0.0
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._forwarders: list[threading.Thread] = []

    def url(self, url: str) -> str:
        """``url`` with this proxy's address in place of the server's."""
        parts = urlparse(url)
        credentials = parts.netloc.rpartition("@")[0]
        netloc = f"{credentials}@127.0.0.1:{self.port}" if credentials else f"127.0.0.1:{self.port}"
        return urlunparse(parts._replace(netloc=netloc))

    def __enter__(self) -> MutingProxy:
        self._acceptor.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes its accept (close alone does not)
        self._listener.close()
        self._acceptor.join(timeout=10)
        for sock in self._sockets:
            with contextlib.suppress(OSError):  # its peer closed it already
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._forwarders:
            thread.join(timeout=10)
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed: the proxy is done
                return
            server = socket.create_connection(self.upstream)
            self._sockets += [client, server]
            self.accepted += 1
            for source, sink, answers in ((client, server, False), (server, client, True)):
                thread = threading.Thread(
                    target=self._forward, args=(source, sink, answers), daemon=True
                )
                self._forwarders.append(thread)
                thread.start()

    def _forward(self, source: socket.socket, sink: socket.socket, answers: bool) -> None:
        """Copy ``source``'s bytes to ``sink`` until either side closes (then both
        directions end); the server's ``answers`` are dropped while muted."""
        try:
            while data := source.recv(65536):
                if answers and self.delay:
                    time.sleep(self.delay)
                if not (answers and self.muted):
                    sink.sendall(data)
        except OSError:
            pass  # a side closed
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
