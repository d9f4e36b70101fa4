"""One worker's Prometheus series, fed by the worker's signals (``cairnq_worker --metrics-port``).

Imports ``prometheus_client`` at the top: only ``cairnq_worker`` imports this
module, and only when ``--metrics-port`` is given. Each worker gets its own
``CollectorRegistry``, so two workers in one process (tests, an embedding
application) never mix their counts, and nothing lands in the global default.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .. import signals

# Handler run times: from a millisecond no-op to a ten-minute job.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# Pickup waits: an idle worker answers in milliseconds, a backlog in minutes.
PICKUP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
# One claim statement: well under a millisecond to a slow, contended second.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

# task_finished's status -> the counter it adds to ("queued" is a retry).
_FINISHED = {"succeeded": "succeeded", "failed": "failed", "queued": "retried", "canceled": "canceled"}


class WorkerSeries:
    """The series of one worker, in a registry of their own; ``connect`` starts counting."""

    def __init__(self, worker_id: str, in_flight: Callable[[], float]) -> None:
        self.worker_id = worker_id
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ("name", "queue")
        self.outcomes: dict[str, Counter] = {
            kind: Counter(
                f"cairnq_worker_tasks_{kind}",
                f"Tasks this worker {verb}, by task name and queue.",
                labels,
                registry=self.registry,
            )
            for kind, verb in (
                ("started", "started (one per attempt)"),
                ("succeeded", "settled as succeeded"),
                ("failed", "settled as failed (no attempt left, or not retryable)"),
                ("retried", "put back for a retry after a failed attempt"),
                ("canceled", "settled as canceled"),
                ("snoozed", "put back because the handler snoozed"),
            )
        }
        self.lease_losses = Counter(
            "cairnq_worker_lease_losses",
            "Attempts whose lease this worker lost (another worker may run the task again).",
            labels,
            registry=self.registry,
        )
        self.run_seconds = Histogram(
            "cairnq_worker_task_run_seconds",
            "Handler run time per task, by task name (a batch call counts once per task).",
            ("name",),
            buckets=RUN_BUCKETS,
            registry=self.registry,
        )
        self.pickup_seconds = Histogram(
            "cairnq_worker_task_pickup_seconds",
            "Claim time minus the later of run_at and creation, by queue (database clock).",
            ("queue",),
            buckets=PICKUP_BUCKETS,
            registry=self.registry,
        )
        self.claim_seconds = Histogram(
            "cairnq_worker_claim_seconds",
            "Duration of each claim statement this worker ran.",
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "cairnq_worker_calls_in_flight",
            "Handler calls running now (a batch is one call).",
            registry=self.registry,
        )
        self.in_flight.set_function(in_flight)
        self._receivers: list[tuple[Any, Callable[..., None]]] = []

    # ---- the receivers: each ignores other workers of the same process -----------
    def _started(self, *, worker_id: str, name: str, queue: str, pickup_ms: int | None = None, **_: Any) -> None:
        if worker_id != self.worker_id:
            return
        self.outcomes["started"].labels(name, queue).inc()
        if pickup_ms is not None:
            self.pickup_seconds.labels(queue).observe(pickup_ms / 1000)

    def _finished(
        self, *, worker_id: str, name: str, queue: str, status: str, duration_ms: int | None, **_: Any
    ) -> None:
        if worker_id != self.worker_id:
            return
        kind = _FINISHED.get(status)
        if kind is not None:
            self.outcomes[kind].labels(name, queue).inc()
        if duration_ms is not None:
            self.run_seconds.labels(name).observe(duration_ms / 1000)

    def _snoozed(self, *, worker_id: str, name: str, queue: str, duration_ms: int | None, **_: Any) -> None:
        if worker_id != self.worker_id:
            return
        self.outcomes["snoozed"].labels(name, queue).inc()
        if duration_ms is not None:
            self.run_seconds.labels(name).observe(duration_ms / 1000)

    def _lease_lost(self, *, worker_id: str, name: str, queue: str = "", **_: Any) -> None:
        if worker_id == self.worker_id:
            self.lease_losses.labels(name, queue).inc()

    def _claim_drawn(self, *, worker_id: str, duration_s: float, **_: Any) -> None:
        if worker_id == self.worker_id:
            self.claim_seconds.observe(duration_s)

    def connect(self) -> None:
        """Start counting this worker's events (strong references: the receivers are bound methods)."""
        for signal, receiver in (
            (signals.task_started, self._started),
            (signals.task_finished, self._finished),
            (signals.task_snoozed, self._snoozed),
            (signals.task_lease_lost, self._lease_lost),
            (signals.claim_drawn, self._claim_drawn),
        ):
            signal.connect(receiver, weak=False, dispatch_uid=(id(self), receiver.__name__))
            self._receivers.append((signal, receiver))

    def disconnect(self) -> None:
        for signal, receiver in self._receivers:
            signal.disconnect(dispatch_uid=(id(self), receiver.__name__))
        self._receivers.clear()
