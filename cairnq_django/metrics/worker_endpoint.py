"""``cairnq_worker --metrics-port``: one worker's series, counted and served until it stops."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .http_server import MetricsServer
from .worker_series import WorkerSeries

if TYPE_CHECKING:
    from ..worker.loop import Worker


class WorkerEndpoint:
    """The series of ``worker``, counting from now, served on ``host:port``.

    Raises ``OSError`` when the address cannot be listened on; nothing is
    connected then.
    """

    def __init__(self, worker: Worker, host: str, port: int) -> None:
        budgets = worker.budgets
        self.series = WorkerSeries(worker.worker_id, in_flight=lambda: budgets.calls)
        self.server = MetricsServer(self.series.registry, host, port)
        self.series.connect()

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.series.disconnect()
        self.server.stop()
