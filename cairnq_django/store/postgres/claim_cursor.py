"""Where each PostgreSQL claim starts reading: after this process's last leased row.

A claimed task leaves its queued version's entry at the head of its queue's
range in ``cairnq_tasks_claim_idx``. Vacuum removes such entries, and the
first scan to meet one marks it dead, but not while some transaction's
snapshot is older than the claim (an idle ``REPEATABLE READ`` session, a long
report): then every claim from the head walks every task claimed since that
snapshot, heap tuple by heap tuple. So a draw starts where this process's
last draw of the same queue and names ended, less a margin for submits that
commit late, and reads from the head once a second to pick up what was
skipped. The probe moves a cursor too: up to the first queued row it
finds, so a worker whose draws come back empty (the others were first)
walks what they claimed once, not on every draw. docs/performance.md
("xmin") has the measurements; SQLite needs none of this (its b-trees hold
no old row versions).

The claim statements read three index ranges in claim order: priorities
above the cursor's, the cursor's priority from its (``run_at_ms``, ``id``)
floor on, then priorities below it. ``Start.head`` reads everything from the
head: any priority with the lowest floor does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...models import Task

# Every row is at or after the smallest int8 time and the empty id. The
# head's priority is the common one, so a worker's claims bind the same
# parameter types from the head and from a cursor (one prepared plan).
HEAD_PRIORITY = 0
HEAD_RUN_AT_MS = -(2**63)
HEAD_ID = ""

# Each draw of a queue reads from its head this often, so a row a cursor
# stepped past (its submit committed long after its run_at_ms, or it was
# skipped while another claimer that then rolled back held it) waits at
# most about this long ...
HEAD_READ_INTERVAL_S = 1.0
# ... unless a read from the head costs more than this share of the time
# between two of them (the walk a held snapshot makes): then they are
# spaced out to that share.
HEAD_READ_SHARE = 0.05

# A submit's run_at_ms is its transaction's start (PostgreSQL's now()), so a
# row can become visible after rows with later run_at_ms were claimed. Rows
# due within this long before the last claim are read again: a submit whose
# transaction lasts less is never stepped past.
LATE_COMMIT_MARGIN_MS = 100

# An empty draw moves its cursor by the database clock read off a lease or
# a probe at most this long before it (see ``ClaimCursors.advance``).
DB_CLOCK_TRUST_S = 10.0

# Which rows a cursor follows: a queue and the draw's names (None: any name).
Key = tuple[str, frozenset[str] | None]


@dataclass(frozen=True)
class Start:
    """Where one queue's draw starts: its priority's rows from (run_at_ms, id) on, and every other priority."""

    queue: str
    priority: int
    run_at_ms: int
    id: str = HEAD_ID

    @classmethod
    def head(cls, queue: str) -> Start:
        """A start that reads ``queue`` from its head (any priority with the lowest floor does)."""
        return cls(queue, HEAD_PRIORITY, HEAD_RUN_AT_MS, HEAD_ID)

    @property
    def from_head(self) -> bool:
        return (self.run_at_ms, self.id) == (HEAD_RUN_AT_MS, HEAD_ID)


@dataclass
class _Position:
    # The last leased row in claim order, and when (database clock) it was leased.
    priority: int
    run_at_ms: int
    id: str
    claimed_ms: int
    # When (monotonic) a draw of this key last read from the head, and how long it took.
    head_read_at: float
    head_read_s: float = 0.0


class ClaimCursors:
    """Per (queue, names), where the next draw starts; shared by the threads of one process."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._positions: dict[Key, _Position] = {}
        self._lock = threading.Lock()
        # The database clock (ms) as last read off a lease or a probe, and
        # when (monotonic) that answer arrived: an empty draw's cursor moves
        # to an estimate of the database clock from it (see ``advance``).
        self._db_ms: int | None = None
        self._db_ms_at = 0.0

    def starts(self, queues: Sequence[str], names: Sequence[str] | None) -> list[Start]:
        """Where a draw (or a probe) of ``queues`` for ``names`` starts, one ``Start`` per queue."""
        wanted = None if names is None else frozenset(names)
        now = self._clock()
        with self._lock:
            positions = [self._positions.get((queue, wanted)) for queue in queues]
        return [_start(queue, position, now) for queue, position in zip(queues, positions)]

    def probe_starts(self, queues: Sequence[str], names: Sequence[str] | None) -> list[Start]:
        """Where a probe of ``queues`` for ``names`` starts.

        Its own cursor's start, once an earlier probe (or a draw of exactly
        these names) left one. Before that, where the draws of those names
        start: a worker draws some names on their own (batch, limits,
        resources) and probes for all of them at once, so the probe starts at
        the earliest floor of the draws that cover its names when they share
        a priority; from the head when a name has no cursor (never drawn with
        rows, or drawn under fleet limits), when the cursors' priorities
        differ, or when a draw would read from the head itself.
        """
        if names is None:
            return self.starts(queues, None)
        wanted = frozenset(names)
        now = self._clock()
        with self._lock:
            owns = {queue: self._positions.get((queue, wanted)) for queue in queues}
            # Every cursor is read only for a queue the probe has none of yet (its first probes).
            entries = (
                [(key, position) for key, position in self._positions.items() if key[0] in queues]
                if any(own is None for own in owns.values())
                else []
            )
        starts = []
        for queue in queues:
            own = owns[queue]
            if own is not None:  # an earlier probe's (or a draw of all these names)
                starts.append(_start(queue, own, now))
                continue
            drawn = [(key[1], _start(queue, position, now)) for key, position in entries
                     if key[0] == queue and key[1] is not None and key[1] <= wanted]
            covered = frozenset().union(*(key_names for key_names, _ in drawn))
            # A draw that reads from the head has the lowest floor: so does the probe.
            if covered == wanted and len({start.priority for _, start in drawn}) == 1:
                starts.append(min((start for _, start in drawn), key=lambda start: (start.run_at_ms, start.id)))
            else:
                starts.append(Start.head(queue))
        return starts

    def advance(
        self,
        names: Sequence[str] | None,
        starts: Sequence[Start],
        rows: Sequence[Task],
        lease_ms: int,
        took_s: float,
        *,
        emptied: Collection[str] = (),
    ) -> None:
        """Move each queue's cursor to the last of ``rows``, leased in ``took_s`` by a draw that began at ``starts``.

        ``emptied``: queues the draw had no claimable row of ``names`` in
        from its start on (it leased fewer rows than it asked for, none of
        theirs, and they were not paused). Their cursors move up to the
        database clock of the draw less the late-commit margin, as after a
        probe that found none: otherwise every draw of names with no rows,
        beside another name's backlog, would read from the head and walk the
        whole backlog.
        """
        wanted = None if names is None else frozenset(names)
        now = self._clock()
        last: dict[str, Task] = {}
        furthest: dict[str, tuple[int, int, str]] = {}
        for row in rows:
            order = _claim_order(row)
            if order > furthest.get(row.queue, _BEFORE_ALL):
                furthest[row.queue], last[row.queue] = order, row
        with self._lock:
            empty_at_ms = None
            if last:
                # A lease starts at the draw's own clock: the queues it found empty move to it.
                drawn_ms = int(max(last.values(), key=_lease_start).lease_until_ms or 0) - lease_ms
                self._db_ms, self._db_ms_at = drawn_ms, now
                empty_at_ms = drawn_ms
            elif emptied:
                # At the draw's start: a clock read off an earlier answer
                # plus the time since can only fall short of it, never pass it.
                empty_at_ms = self._db_estimate(now - took_s)
            for start in starts:
                key = (start.queue, wanted)
                position = self._positions.get(key)
                newest = last.get(start.queue)
                if newest is not None:
                    self._positions[key] = position = _Position(
                        priority=newest.priority,
                        run_at_ms=newest.run_at_ms,
                        id=newest.id,
                        claimed_ms=int(newest.lease_until_ms or 0) - lease_ms,
                        head_read_at=now if position is None else position.head_read_at,
                        head_read_s=0.0 if position is None else position.head_read_s,
                    )
                elif empty_at_ms is not None and start.queue in emptied:
                    position = self._emptied(key, position, start, empty_at_ms, now)
                if start.from_head and position is not None:
                    position.head_read_at, position.head_read_s = now, took_s

    def _db_estimate(self, at: float) -> int | None:
        """The database clock at monotonic time ``at``, from a reading at most ``DB_CLOCK_TRUST_S`` old."""
        if self._db_ms is None or not 0 <= at - self._db_ms_at <= DB_CLOCK_TRUST_S:
            return None
        return self._db_ms + int((at - self._db_ms_at) * 1000)

    def _emptied(self, key: Key, position: _Position | None, start: Start, at_ms: int, now: float) -> _Position:
        """The cursor of ``key`` after a draw from ``start`` found no row there, the database clock then ``at_ms``."""
        if position is None:
            position = self._positions[key] = _Position(
                start.priority, at_ms, HEAD_ID, claimed_ms=at_ms, head_read_at=now
            )
        elif _floor(position) < (at_ms - LATE_COMMIT_MARGIN_MS, HEAD_ID):
            position.run_at_ms, position.id, position.claimed_ms = at_ms, HEAD_ID, at_ms
        return position

    def probed(
        self, names: Sequence[str] | None, starts: Sequence[Start], rows: Sequence[dict[str, Any]], took_s: float
    ) -> None:
        """Move each queue's cursor for ``names`` up to the next queued row a probe from ``starts`` found.

        That row is the first queued row of the start's priority, due or
        not, or else the first due row of another priority; no queued row of
        its priority comes before it. So a draw needs not read what lies
        before it again: under a held snapshot that is the walk over every
        task claimed since, which a draw that leases nothing (the other
        workers were first) would otherwise repeat. A row due but not leased
        yet stays ahead of the cursor, and a paused queue's cursor does not
        move. As after a draw, the cursor stays the late-commit margin
        behind the clock.
        """
        wanted = None if names is None else frozenset(names)
        now = self._clock()
        found = {row["queue"]: row for row in rows if row["queue"] is not None}
        with self._lock:
            if found:
                self._db_ms, self._db_ms_at = max(int(row["now_ms"]) for row in found.values()), now
            for start in starts:
                row = found.get(start.queue)
                if row is None or row["paused"]:
                    continue
                priority, reach = start.priority, (int(row["now_ms"]) - LATE_COMMIT_MARGIN_MS, HEAD_ID)
                if row["next_id"] is not None:
                    priority = int(row["next_priority"])
                    reach = min(reach, (int(row["next_run_at_ms"]), str(row["next_id"])))
                key = (start.queue, wanted)
                position = self._positions.get(key)
                if position is None or position.priority != priority:
                    position = self._positions[key] = _Position(
                        priority, *reach, claimed_ms=int(row["now_ms"]),
                        head_read_at=now if position is None else position.head_read_at,
                        head_read_s=0.0 if position is None else position.head_read_s,
                    )
                else:
                    # Back, too, after a read from the head that found a row the cursor stepped past.
                    position.run_at_ms, position.id = reach
                    position.claimed_ms = int(row["now_ms"])
                if start.from_head:
                    position.head_read_at, position.head_read_s = now, took_s


def _floor(position: _Position) -> tuple[int, str]:
    """Where a draw from ``position`` starts within its priority: its (run_at_ms, id) floor."""
    # In a backlog the last row is due long before the clock and is the
    # floor itself (rows submitted in one transaction share a run_at_ms, so
    # the id counts); in a steady flow it is moments old, and the margin
    # covers submits still committing.
    late = position.claimed_ms - LATE_COMMIT_MARGIN_MS
    if late < position.run_at_ms:
        return (late, HEAD_ID)
    return (position.run_at_ms, position.id)


def _start(queue: str, position: _Position | None, now: float) -> Start:
    if position is None:
        return Start.head(queue)
    if now - position.head_read_at >= max(HEAD_READ_INTERVAL_S, position.head_read_s / HEAD_READ_SHARE):
        # The whole queue, and the cursor's priority from its lowest floor: a
        # probe from here can move the cursor up to the first row it finds.
        return Start(queue, position.priority, HEAD_RUN_AT_MS, HEAD_ID)
    return Start(queue, position.priority, *_floor(position))


def statement_params(starts: Sequence[Start]) -> dict[str, Any]:
    """The claim statements' start parameters: per queue, and the first queue's as scalars."""
    return {
        "from_priorities": [start.priority for start in starts],
        "from_run_ats": [start.run_at_ms for start in starts],
        "from_ids": [start.id for start in starts],
        "from_priority": starts[0].priority if starts else None,
        "from_run_at_ms": starts[0].run_at_ms if starts else None,
        "from_id": starts[0].id if starts else None,
    }


def _lease_start(row: Task) -> int:
    return int(row.lease_until_ms or 0)


def _claim_order(row: Task) -> tuple[int, int, str]:
    """A key that grows along claim order (priority DESC, run_at_ms, id)."""
    return (-row.priority, row.run_at_ms, row.id)


# Below every row's ``_claim_order``.
_BEFORE_ALL = (-(2**63), -(2**63), "")


# A lease is written as the writer's clock plus the lease, so one that ran
# out before a probe that found none becomes visible later only if its
# writer's transaction outlasted the lease by this much (or its clock is
# behind ours by as much): the full probe, once per lease period, finds it.
EXPIRED_LEASE_MARGIN_MS = 1_000


class ExpiryFloor:
    """From which ``lease_until_ms`` a probe looks for expired leases.

    A settled task's running version keeps its ``cairnq_tasks_lease_idx``
    entry until vacuum removes it, and under a held snapshot a probe would
    step over every one whose lease has run out since. So a probe looks from
    the clock of the last probe that found none, less the margin; the full
    probe (the one that also looks for leaseless rows) from the lowest.
    """

    def __init__(self) -> None:
        self._clear_until_ms: int | None = None
        self._lock = threading.Lock()

    def since(self, *, full: bool) -> int:
        """The lowest ``lease_until_ms`` the next probe reads."""
        with self._lock:
            clear = self._clear_until_ms
        if full or clear is None:
            return HEAD_RUN_AT_MS
        return clear - EXPIRED_LEASE_MARGIN_MS

    def probed(self, now_ms: int, *, expired: bool) -> None:
        """Record a probe's clock; one that found an expired lease leaves the floor (recovery comes next)."""
        if not expired:
            with self._lock:
                self._clear_until_ms = now_ms
