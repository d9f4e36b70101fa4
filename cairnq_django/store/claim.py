"""The SQL store's claim (protocol 3.9): probe, session, draw, next due time.

Read top to bottom: ``claim_session`` probes (or takes the caller's probe),
then runs the caller's plan either as one autocommit statement (a single
draw with no recovery to run) or in one transaction that first recovers
expired leases; each ``draw`` picks the claim statement whose shape fits the
queues and names. ``SQLStore`` binds these functions as its methods, and the
statements run through its execution helpers and dialect hooks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..protocol.limits import FleetLimits
from .base import ClaimProbe, ClaimRequest, Draw, Recovered
from .rows import decode_rows, defer_large_payloads, task_from_row

if TYPE_CHECKING:
    from ..models import Task
    from .sql_store import SQLStore

T = TypeVar("T")


def claim_session(store: SQLStore, request: ClaimRequest, plan: Callable[[Draw], object]) -> list[Task] | None:
    """Run one claim session (protocol 3.9); see ``Store.claim_session``."""
    lease_ms = request.lease_ms
    if not isinstance(lease_ms, int) or lease_ms < 1:
        raise ValueError(f"lease_ms must be an integer >= 1, not {lease_ms!r}")
    queues = list(dict.fromkeys(request.queues))
    relaxed = request.async_commit
    if request.reuse_plans:
        store._reuse_claim_plans()
    probe = request.probe
    if probe is True:
        probe = probe_claim(store, queues, request.names)
    if probe is not False and not probe.any:
        return None
    recover = request.recover
    if recover is None:
        recover = probe is False or probe.expired
    after_lock = request.hooks.after_lock
    worker_id = request.worker_id
    # Inside the caller's transaction PostgreSQL's now() stands still, so a
    # task it submits next can sort before the rows just claimed: such a
    # claim reads from the queue's head and leaves no cursor behind.
    from_head = store._in_transaction()

    def run(names: Sequence[str] | None, limit: int, fleet: FleetLimits | None) -> list[Task]:
        if fleet is not None:
            return draw_limited(store, queues, worker_id, lease_ms, fleet, limit, relaxed)
        return draw(store, queues, worker_id, lease_ms, names, limit, relaxed, from_head=from_head)

    # One draw and nothing to recover: one autocommit statement instead of
    # BEGIN, draw, COMMIT. A hook after the locks needs them held open.
    if request.single_draw and not recover and after_lock is None:

        def statement() -> list[Task]:
            session = Draw(run=_once(run))  # fresh per attempt, as below
            plan(session)
            return session.rows

        with store._claim_scope(relaxed):
            return store._run(statement)

    recovered: list[Recovered] = []

    def transaction() -> list[Task]:
        # A fresh Draw per attempt: a retried session must not report rows
        # drawn (or leases recovered) by a rolled-back one.
        session = Draw(run=run)
        recovered.clear()
        with store._atomic():
            if recover:
                recovered.extend(store._recover(relaxed))
            plan(session)
            if session.rows and after_lock is not None:
                after_lock()
        return session.rows

    with store._claim_scope(relaxed):
        rows = store._run(transaction)
    if recovered and request.on_recovered is not None:
        request.on_recovered(list(recovered))
    return rows


def probe_claim(
    store: SQLStore, queues: Sequence[str], names: Sequence[str] | None, *, leaseless: bool = True
) -> ClaimProbe:
    """Run the read-only probe (3.9 step 1): is work due, has any lease expired?

    ``leaseless`` also counts a running row with no lease (a foreign
    writer's) as expired. Finding none reads every running row, so a
    worker asks it once per lease period rather than on every probe.
    """
    wanted = list(dict.fromkeys(queues))
    served = None if names is None else list(dict.fromkeys(names))
    params = {
        "queues": store._list(wanted),
        "names": None if served is None else store._list(served),
        "leaseless": store._bool(leaseless),
    }
    rows = store._probe(params, wanted, served)
    return ClaimProbe(due=any(bool(row["due"]) for row in rows), expired=bool(rows[0]["expired"]))


def draw(
    store: SQLStore,
    queues: list[str],
    worker_id: str,
    lease_ms: int,
    names: Sequence[str] | None,
    limit: int,
    relaxed: bool = False,
    *,
    from_head: bool = False,
) -> list[Task]:
    """One claim draw, using the equality shape when one queue / one name.

    ``from_head``: read each queue from its head, not from where this
    process's last draw of it ended (PostgreSQL's claim cursor).
    """
    if not queues:
        return []
    params: dict[str, Any] = {
        "worker_id": worker_id,
        "lease_ms": lease_ms,
        "limit": limit,
        **store._commit_mode(relaxed),
    }
    wanted = None if names is None else list(dict.fromkeys(names))
    one_name = wanted is not None and len(wanted) == 1
    if len(queues) == 1:
        params["queue"] = queues[0]
        statement = "claim_one_queue_one_name" if one_name else "claim_one_queue"
    else:
        params["queues"] = store._list(queues)
        statement = "claim_one_name" if one_name else "claim"
    if one_name:
        params["name"] = wanted[0]  # type: ignore[index]
    else:
        params["names"] = None if wanted is None else store._list(wanted)
    return store._draw(statement, params, queues, wanted, lease_ms, from_head=from_head)


DrawFunction = Callable[[Sequence[str] | None, int, FleetLimits | None], T]


# A keyed draw reads at least this many queued rows of its name, so keys
# with room are found behind a long run of one key's tasks.
KEYED_SCAN_ROWS = 512

# A keyed claim of a name limited by concurrency alone reads first this many
# rows per row it may take (saturated keys skipped), and reads on to
# KEYED_SCAN_ROWS past their keys only when they hold too few keys.
KEYED_HEAD_ROWS_PER_ROW = 4


def draw_limited(
    store: SQLStore,
    queues: list[str],
    worker_id: str,
    lease_ms: int,
    fleet: FleetLimits,
    limit: int,
    relaxed: bool = False,
) -> list[Task]:
    """One draw of ``fleet.name`` within its fleet limits; rows in claim order (docs/limits.md).

    The dialect counts the fleet's live calls and recent starts and leases
    what they admit in one transaction, serialized per scope (PostgreSQL:
    advisory locks; SQLite: the write lock), and logs one start per call.
    """
    if not queues:
        return []
    rate = fleet.rate
    own = [fleet.concurrency] if fleet.concurrency is not None else []
    if rate is not None:
        own += [rate.count, rate.burst]
    params: dict[str, Any] = {
        "scopes": store._list(fleet.scopes),
        "name_scope": fleet.name_scope,
        "resource_scope": fleet.resource_scope,
        "queues": store._list(queues),
        "name": fleet.name,
        "worker_id": worker_id,
        "lease_ms": lease_ms,
        "limit": limit,
        "batch": fleet.batch,
        "keyed": store._bool(fleet.keyed),
        "concurrency": fleet.concurrency,
        "rate_count": rate.count if rate else None,
        "rate_ms": rate.window_ms if rate else None,
        "burst_count": rate.burst if rate else None,
        "burst_ms": rate.burst_window_ms if rate else None,
        "fresh_room": min(own) if own else None,
        "resource_capacity": fleet.resource_capacity,
        "scan": max(limit, KEYED_SCAN_ROWS) if fleet.keyed else limit,
        "head": min(max(limit, KEYED_SCAN_ROWS), KEYED_HEAD_ROWS_PER_ROW * limit),
        **store._commit_mode(relaxed),
    }
    rows = decode_rows(defer_large_payloads(store._limited_rows(params, fleet)))
    return [task_from_row(store.alias, row) for row in rows]


def _once(run: DrawFunction[T]) -> DrawFunction[T]:
    """Wrap a draw so a second call fails: a transactionless session may draw only once."""
    used = False

    def draw_once(names: Sequence[str] | None, limit: int, fleet: FleetLimits | None) -> T:
        nonlocal used
        if used:
            raise RuntimeError("a single-draw claim session drew twice")
        used = True
        return run(names, limit, fleet)

    return draw_once


def next_due(
    store: SQLStore, queues: Sequence[str], names: Sequence[str], *, max_steps: int = 64
) -> tuple[int, str] | None:
    """When the earliest not-yet-due queued task of ``queues``/``names`` is due, and its name.

    Returns ``(milliseconds from now, name)``, or None when no such task
    waits. Read-only; tasks already due are not counted (the claim takes
    those), so the milliseconds are at least 1.
    """
    wanted, served = list(dict.fromkeys(queues)), list(dict.fromkeys(names))
    if not wanted or not served:
        return None
    params = {
        "queues": store._list(wanted),
        "names": store._list(served),
        "max_steps": max_steps,
    }
    rows = store._rows("next_run_at", params)
    if not rows or rows[0]["due_in_ms"] is None:
        return None
    return int(rows[0]["due_in_ms"]), str(rows[0]["name"])
