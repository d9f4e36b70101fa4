"""Serve one registry over HTTP in Prometheus text format, on a thread of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import start_http_server

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class MetricsServer:
    """``registry`` served on ``host:port`` (port 0: any free port, see ``port``) until ``stop``."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        # OSError (port taken, address not ours, unknown host) reaches the caller,
        # which names the flag; nothing is left listening.
        self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
