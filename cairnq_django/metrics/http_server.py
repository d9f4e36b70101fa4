"""Serve one registry over HTTP in Prometheus text format, so that scrapers never take a worker's work.

One event loop, on a thread of its own, serves every connection: an idle or
slow client holds a socket, never a thread. (``prometheus_client``'s server
spent a thread per connection and never timed one out: 400 idle connections
put a worker at 100 % CPU.) A connection gets ``TIMEOUT_S`` to send its
request and as long again to take the answer, then is dropped; one request
per connection. Every answer is the cached text (``exposition.py``).

At most ``MAX_CONNECTIONS`` are open. Beyond them new connections wait in
the listen backlog, and one is let in whenever a connection ends or the
oldest one still silent has been so for ``GRACE_S`` (it is dropped to make
room): a burst of scrapes is served in turn, and a flood of idle
connections cannot lock a scraper out for long.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import TYPE_CHECKING

from .exposition import CachedExposition
from .text_format import CONTENT_TYPE

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("cairnq_django.metrics")

TIMEOUT_S = 5.0
MAX_CONNECTIONS = 128
# A scraper sends its request at once; one silent this long may be pushed out.
GRACE_S = 0.5
# Connections waiting to be let in (the system may cap it: somaxconn).
BACKLOG = 1024
# A request head longer than this is no scrape.
MAX_HEAD_BYTES = 8192
# After the process ran out of descriptors, accepting waits this long.
ACCEPT_RETRY_S = 1.0


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on the first address ``host`` resolves to (as ``prometheus_client`` chose)."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    listener = socket.create_server(address, family=family, backlog=BACKLOG)
    listener.setblocking(False)
    return listener


def _response(status: str, body: bytes, content_type: str, *, head_only: bool = False) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + (b"" if head_only else body)


class MetricsServer:
    """``registry`` served on ``host:port`` (port 0: any free port, see ``port``) until ``stop``.

    Raises ``OSError`` (port taken, address not ours, unknown host) with
    nothing left listening.
    """

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.exposition = CachedExposition(registry)
        self._listener = _listen(host, port)
        self.host = host
        self.port = int(self._listener.getsockname()[1])
        self._loop = asyncio.new_event_loop()
        # Open connections, and those still reading their request with when they
        # were let in (oldest first); the tasks serving them (the loop keeps weak ones).
        self._open: set[asyncio.StreamWriter] = set()
        self._reading: dict[asyncio.StreamWriter, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._freed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="cairnq-metrics", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    def _run(self) -> None:
        accepting = self._loop.create_task(self._accept())
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._close(accepting))
            self._loop.close()
            self._listener.close()

    async def _close(self, accepting: asyncio.Task[None]) -> None:
        accepting.cancel()
        for writer in list(self._open):
            writer.transport.abort()
        await asyncio.gather(accepting, *self._tasks, return_exceptions=True)

    # ---- letting connections in -------------------------------------------------
    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        self._freed = asyncio.Event()
        while True:
            await self._room(loop)
            try:
                connection, _ = await loop.sock_accept(self._listener)
            except OSError as exc:  # out of descriptors, say: the backlog keeps the rest
                logger.warning("metrics endpoint cannot accept a connection: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            try:
                reader, writer = await asyncio.open_connection(sock=connection, limit=MAX_HEAD_BYTES)
            except OSError:
                connection.close()
                continue
            self._open.add(writer)
            self._reading[writer] = loop.time()
            task = loop.create_task(self._serve(reader, writer))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _room(self, loop: asyncio.AbstractEventLoop) -> None:
        """Return once a connection may be let in: fewer than the cap are open, or one silent too long was dropped."""
        assert self._freed is not None
        while len(self._open) >= MAX_CONNECTIONS:
            wait = None
            if self._reading:
                oldest, since = next(iter(self._reading.items()))
                wait = since + GRACE_S - loop.time()
                if wait <= 0:
                    self._forget(oldest)
                    oldest.transport.abort()
                    return
            self._freed.clear()
            try:
                await asyncio.wait_for(self._freed.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _forget(self, writer: asyncio.StreamWriter) -> None:
        self._reading.pop(writer, None)
        self._open.discard(writer)
        if self._freed is not None:
            self._freed.set()

    # ---- one connection ---------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)
            self._reading.pop(writer, None)
            writer.write(self._answer(head))
            # Closing flushes the answer first; a client that will not read it is cut off.
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # silent too long, a head too long, pushed out, or gone: nothing to answer
        finally:
            self._forget(writer)
            writer.transport.abort()

    def _answer(self, head: bytes) -> bytes:
        method = head.split(b" ", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return _response("405 Method Not Allowed", b"only GET and HEAD\n", "text/plain; charset=utf-8")
        try:
            body = self.exposition.text()
        except Exception:
            logger.exception("rendering this worker's metrics failed")
            return _response("500 Internal Server Error", b"rendering failed; see the worker's log\n", "text/plain")
        return _response("200 OK", body, CONTENT_TYPE, head_only=method == b"HEAD")
