"""Fixture handlers under fleet limits (docs/limits.md); imported by tasks.py.

Each records start/end in the ledger and sleeps ``payload["ms"]``, so tests
can check from the handlers' own timestamps that no limit was exceeded.
"""

from __future__ import annotations

from typing import Any

import cairnq_django as cairnq

from .tasks import _sleep_ms, ledger


def _run(ctx: Any, payload: Any) -> None:
    ledger("start", ctx, key=(payload or {}).get("customer"))
    _sleep_ms(payload)
    ledger("end", ctx, key=(payload or {}).get("customer"))


@cairnq.task("demo.fleet.charge", global_concurrency=3)
def charge(ctx: Any, payload: Any) -> None:
    """At most three running in the whole fleet."""
    _run(ctx, payload)


@cairnq.task("demo.fleet.sync", global_concurrency=1, limit_key="customer")
def sync(ctx: Any, payload: Any) -> None:
    """At most one running per customer, fleet-wide."""
    _run(ctx, payload)


@cairnq.task("demo.fleet.rated", rate_limit="10/s")
def rated(ctx: Any, payload: Any) -> None:
    """At most ten starts in any second, fleet-wide."""
    _run(ctx, payload)


@cairnq.task("demo.fleet.openai", resource="openai")
def openai(ctx: Any, payload: Any) -> None:
    """Holds one unit of the fleet-wide "openai" resource (testproject: 2)."""
    _run(ctx, payload)


@cairnq.task("demo.fleet.loose", global_concurrency=1_000_000)
def loose(ctx: Any, payload: Any) -> None:
    """A limit that never binds: the bench's and tests' cost check."""
    return None
