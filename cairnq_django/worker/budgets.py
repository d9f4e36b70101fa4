"""Account for the worker's budgets: calls, per-name slots, resource units, payload bytes.

Only the claim loop acquires (right after a claim whose quotas were computed
from these same counters under the claim transaction); any thread releases.
Releases only ever lower the counts, so a quota computed before a release is
still safe after it: no call ever waits for a slot while holding a lease.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..protocol.limits import FleetLimits

if TYPE_CHECKING:
    from ..tasks.registry import TaskDefinition


@dataclass(frozen=True)
class Source:
    """A set of names drawn by one claim draw, with one batch size (protocol 4.3)."""

    names: tuple[str, ...]
    batch: int = 1
    # Per-name concurrency; only a single-name source carries one.
    concurrency: int | None = None
    # A resource this process caps (RESOURCES / --resource); None: no local cap.
    resource: str | None = None
    # Limits counted across the fleet, in the claim; only a single-name source carries them.
    fleet: FleetLimits | None = None

    @property
    def restricted(self) -> bool:
        """Whether a limit of the source's own caps its calls (it never claims ahead)."""
        return self.concurrency is not None or self.resource is not None or self.fleet is not None

    @property
    def key(self) -> str | None:
        return self.names[0] if self.concurrency is not None else None


@dataclass
class Budgets:
    """Counters of what is in flight, with a condition that wakes the claim loop."""

    concurrency: int
    resources: dict[str, int] = field(default_factory=dict)
    claim_batch: int | None = None
    max_in_flight_bytes: int | None = None
    # Calls claimed beyond ``concurrency`` (CLAIM_AHEAD): they wait in the
    # executor until a slot frees. Only a source with no limit of its own
    # (per-name concurrency, a resource, a fleet limit) claims ahead: its
    # tasks hold their slot and their lease while they wait.
    ahead: int = 0
    # Whether a source's calls may be claimed ahead; None: any source without
    # a limit of its own. The automatic mode (run_times.py) also asks for names seen to be short.
    may_claim_ahead: Callable[[Source], bool] | None = None
    calls: int = 0
    bytes: int = 0
    by_name: dict[str, int] = field(default_factory=dict)
    by_resource: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(threading.Lock())
        # Bumped by every release: the idle wait ends early when a slot frees.
        self.releases = 0

    # ---- reading (claim loop) -------------------------------------------
    def free(self) -> int:
        """Calls the next claim may take: the free slots, and ``ahead`` more."""
        return self.concurrency + self.ahead - self.calls

    def free_slots(self, drawn: int = 0) -> int:
        """Calls the next claim may take without claiming ahead (``drawn``: taken earlier this poll)."""
        return max(0, self.concurrency - self.calls - drawn)

    def claims_ahead(self, source: Source) -> bool:
        """Whether ``source``'s calls may go past the free slots."""
        if source.restricted:
            return False
        return self.may_claim_ahead is None or self.may_claim_ahead(source)

    def must_wait(self) -> bool:
        """True when something runs and either no call slot is free (claiming ahead: a claimed
        call still waits for one) or the byte budget is spent.

        With nothing running the worker claims regardless, so a payload larger
        than the whole byte budget still runs (alone) instead of blocking forever.
        """
        if self.calls == 0:
            return False
        # Claiming ahead refills only once every claimed call has started, so
        # one claim brings ``ahead`` calls instead of one claim per freed slot.
        if self.calls >= self.concurrency + (1 if self.ahead else 0):
            return True
        return (
            self.max_in_flight_bytes is not None
            and self.bytes >= self.max_in_flight_bytes
        )

    def source_ceiling(self, source: Source, taken: dict[str, int], drawn: int = 0) -> int | None:
        """Return the source's own call ceiling this poll, or None if only ``free`` applies.

        ``taken`` holds resource units and ``drawn`` the calls earlier draws of
        the same poll already took: the counters only move when calls start,
        after the plan returns.
        """
        limits: list[int] = []
        if self.ahead and not self.claims_ahead(source):
            limits.append(self.free_slots(drawn))
        if self.claim_batch is not None:
            limits.append(max(1, self.claim_batch // source.batch))
        if source.concurrency is not None:
            limits.append(
                max(0, source.concurrency - self.by_name.get(source.names[0], 0))
            )
        if source.resource is not None:
            capacity = self.resources.get(source.resource, 0)
            used = self.by_resource.get(source.resource, 0) + taken.get(
                source.resource, 0
            )
            limits.append(max(0, capacity - used))
        return min(limits) if limits else None

    # ---- acquiring and releasing ---------------------------------------------
    def acquire(self, source: Source, nbytes: int) -> None:
        with self.changed:
            self.calls += 1
            self.bytes += nbytes
            if source.concurrency is not None:
                name = source.names[0]
                self.by_name[name] = self.by_name.get(name, 0) + 1
            if source.resource is not None:
                self.by_resource[source.resource] = (
                    self.by_resource.get(source.resource, 0) + 1
                )

    def release(self, source: Source, nbytes: int) -> None:
        with self.changed:
            self.calls -= 1
            self.bytes -= nbytes
            if source.concurrency is not None:
                _drop(self.by_name, source.names[0])
            if source.resource is not None:
                _drop(self.by_resource, source.resource)
            self.releases += 1
            self.changed.notify_all()

    def nudge(self) -> None:
        """End the claim loop's wait as a release would: something else it waits on changed."""
        with self.changed:
            self.releases += 1
            self.changed.notify_all()

    def wait_for_release(self, seen: int, timeout: float) -> None:
        """Block until a release after ``seen`` happened, or ``timeout`` seconds."""
        with self.changed:
            if self.releases == seen:
                self.changed.wait(timeout)


def _drop(counts: dict[str, int], key: str) -> None:
    # Deleting at zero keeps the maps to what is actually in flight.
    rest = counts.get(key, 1) - 1
    if rest > 0:
        counts[key] = rest
    else:
        counts.pop(key, None)


def build_sources(
    definitions: Iterable[TaskDefinition],
    resources: Mapping[str, int] | None = None,
    global_resources: Mapping[str, int] | None = None,
) -> list[Source]:
    """Split registered handlers into claim sources, registration order, shared last.

    A resource only ``global_resources`` declares is capped in the claim,
    not by this process; one in both is capped both ways.
    """
    local = resources if resources is not None else {}
    fleet_wide = global_resources or {}
    sources: list[Source] = []
    shared: list[str] = []
    for definition in definitions:
        if definition.own_source:
            resource = definition.resource
            sources.append(
                Source(
                    names=(definition.name,),
                    batch=definition.batch or 1,
                    concurrency=definition.concurrency,
                    resource=resource if resource is not None and (resource in local or resource not in fleet_wide) else None,
                    fleet=fleet_limits(definition, fleet_wide),
                )
            )
        else:
            shared.append(definition.name)
    if shared:
        sources.append(Source(names=tuple(shared)))
    return sources


def fleet_limits(definition: TaskDefinition, global_resources: Mapping[str, int]) -> FleetLimits | None:
    """The fleet limits a draw of ``definition`` honours, or None when it has none."""
    resource = definition.resource if definition.resource in global_resources else None
    if not definition.fleet_limited and resource is None:
        return None
    return FleetLimits(
        name=definition.name,
        batch=definition.batch or 1,
        concurrency=definition.global_concurrency,
        rate=definition.rate_limit,
        keyed=definition.limit_key is not None,
        resource=resource,
        resource_capacity=global_resources[resource] if resource is not None else None,
    )


def fleet_keep_ms(sources: Iterable[Source]) -> dict[str, int] | None:
    """How long each fleet scope of ``sources`` needs its logged starts; None when none is limited.

    A rate scope needs its window; a concurrency or resource scope only its
    running calls, which are never pruned.
    """
    keep: dict[str, int] = {}
    for source in sources:
        fleet = source.fleet
        if fleet is None:
            continue
        for scope in fleet.scopes:
            window = fleet.rate.window_ms if fleet.rate is not None and scope == fleet.name_scope else 0
            keep[scope] = max(keep.get(scope, 0), window)
    return keep or None
