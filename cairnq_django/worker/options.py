"""``WorkerOptions``: every knob of a worker, filled from ``CAIRNQ`` or the command's flags."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..conf import get_config


@dataclass
class WorkerOptions:
    """Every knob of a worker; ``from_settings`` fills them from ``CAIRNQ``."""

    queues: list[str] = field(default_factory=lambda: ["default"])
    concurrency: int = 1
    resources: dict[str, int] = field(default_factory=dict)
    # Fleet-wide capacities (CAIRNQ["GLOBAL_RESOURCES"]), counted in the claim.
    global_resources: dict[str, int] = field(default_factory=dict)
    lease_ms: int = 30_000
    heartbeat_interval_ms: int | None = None
    max_run_ms: int | None = None
    claim_batch: int | None = None
    # Calls claimed beyond the free slots, waiting for one (docs/worker.md#claiming-ahead):
    # "auto" claims ahead only tasks of names seen to run short (run_times.py).
    claim_ahead: int | str = "auto"
    poll_interval_ms: int = 500
    max_in_flight_bytes: int | None = None
    retry_backoff_ms: int = 1_000
    retry_backoff_max_ms: int = 30_000
    drain_timeout: float = 30.0
    burst: bool = False
    max_tasks: int | None = None
    async_claim_commit: bool = True

    @classmethod
    def from_settings(cls, **overrides: Any) -> WorkerOptions:
        """Build options from ``CAIRNQ``, with non-None ``overrides`` winning."""
        config = get_config()
        options = cls(
            queues=list(config["QUEUES"]),
            concurrency=config["CONCURRENCY"],
            resources=dict(config["RESOURCES"] or {}),
            global_resources=dict(config["GLOBAL_RESOURCES"] or {}),
            lease_ms=config["LEASE_MS"],
            heartbeat_interval_ms=config["HEARTBEAT_INTERVAL_MS"],
            max_run_ms=config["MAX_RUN_MS"],
            claim_batch=config["CLAIM_BATCH"],
            claim_ahead=config["CLAIM_AHEAD"],
            poll_interval_ms=config["POLL_INTERVAL_MS"],
            max_in_flight_bytes=config["MAX_IN_FLIGHT_BYTES"],
            retry_backoff_ms=config["RETRY_BACKOFF_MS"],
            retry_backoff_max_ms=config["RETRY_BACKOFF_MAX_MS"],
            drain_timeout=float(config["DRAIN_TIMEOUT"]),
            async_claim_commit=bool(config["ASYNC_CLAIM_COMMIT"]),
        )
        for key, value in overrides.items():
            if value is None:
                continue
            if key == "resources":
                options.resources.update(value)
            else:
                setattr(options, key, value)
        return options
