"""The claim poll: which sources to draw, in what order and how many rows (protocol 4.2, 4.3).

``ClaimPlanner.poll`` reads top to bottom: choose the source order, probe or
skip the probe, run the claim session(s), draw each source within the live
budgets, and group the rows into calls. A source is a name with ``batch``,
``concurrency`` or ``resource`` (drawn alone) or the rest of the names
(drawn together). What the last polls learned, the fast path that lets a
busy worker skip the probe and empty sources, is one ``PollState``.

Slots are taken by the worker right after the claim, from the same counters
the plan read, so a leased task never waits for a slot; calls are deducted
only for rows a draw actually returned.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from django.db import Error as DatabaseError

from .. import signals
from ..models import Task
from ..store.base import NO_HOOKS, ClaimHooks, ClaimProbe, ClaimRequest, Draw, Recovered
from ..tasks.registry import TaskDefinition, get_task
from .budgets import Budgets, Source

if TYPE_CHECKING:
    from ..store.base import Store

logger = logging.getLogger("cairnq_django.worker")

# While busy, a source whose draw came back empty is drawn last in the polls
# of the next 50 ms, so a poll usually ends at its first draw.
EMPTY_SOURCE_HOLD_S = 0.05

# One handler call: its definition (None if unregistered) and its rows.
CallRows = tuple[TaskDefinition | None, list[Task]]
# What a poll drew: each source that got rows, with its rows cut into calls.
Drawn = list[tuple[Source, list[CallRows]]]


@dataclass
class PollState:
    """What the last polls learned; each field lets the next poll skip work."""

    # Where the rotation starts: after the first source that last got rows.
    cursor: int = 0
    # A draw of the last poll came back full: more is due, the probe can wait.
    last_full: bool = False
    # The last poll drew nothing (a LISTEN hint then picks the source to try first).
    was_idle: bool = True
    # The name the last idle wait was cut short for: its source is drawn first.
    due_name: str | None = None
    # When the probe last ran, and last looked for running rows with no lease.
    probed_at: float = -1e9
    leaseless_at: float = -1e9
    # Per source: drawn last until then (it came back empty while busy).
    empty_until: dict[tuple[str, ...], float] = field(default_factory=dict)
    # Per source: when it last got rows.
    productive_at: dict[tuple[str, ...], float] = field(default_factory=dict)


class ClaimPlanner:
    """Run the worker's claim polls against ``store`` for ``sources``, within ``budgets``."""

    def __init__(
        self,
        store: Store,
        sources: list[Source],
        budgets: Budgets,
        *,
        queues: Sequence[str],
        names: Sequence[str],
        worker_id: str,
        lease_ms: int,
        poll_s: float,
        async_commit: bool,
        write_lock: threading.Lock | threading.RLock | None = None,
        hooks: ClaimHooks = NO_HOOKS,
        on_recovered: Callable[[list[Recovered]], None] | None = None,
        short_names: Callable[[tuple[str, ...]], tuple[str, ...]] | None = None,
    ) -> None:
        self.store = store
        self.sources = sources
        self.budgets = budgets
        self.queues = queues
        self.names = names
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.poll_s = poll_s
        self.async_commit = async_commit
        self.write_lock = write_lock
        self.hooks = hooks
        self.on_recovered = on_recovered
        # The automatic claim-ahead (run_times.py): which of some names are short.
        self.short_names = short_names
        self.state = PollState()
        # The session of every fast-path draw: no probe (the poll asked it, or
        # skipped it on purpose), no recovery (expired leases were asked about
        # less than a poll interval ago), one draw, so one autocommit statement.
        # Nothing but the worker's own statements runs on the claim thread's
        # connection (handlers have theirs), so its plans can be reused.
        self.one_draw = self._request(probe=False, recover=False, single_draw=True)
        # The same, with the automatic claim-ahead's second draw of the short names.
        self.ahead_draws = self._request(probe=False, recover=False, single_draw=False)

    def _request(self, *, probe: ClaimProbe | bool, recover: bool | None, single_draw: bool) -> ClaimRequest:
        return ClaimRequest(
            self.queues,
            self.worker_id,
            self.lease_ms,
            self.names,
            probe=probe,
            recover=recover,
            single_draw=single_draw,
            async_commit=self.async_commit,
            reuse_plans=True,
            hooks=self.hooks,
            on_recovered=self.on_recovered,
        )

    # ---- one poll ------------------------------------------------------------
    def poll(self, *, hinted: bool, remaining: int | None) -> Drawn:
        """Run one poll: claim sessions of one draw each, up to the first that gets rows.

        ``hinted``: a LISTEN notification or a freed slot woke the worker.
        ``remaining``: how many more rows the worker may claim (None: no limit).

        The protocol's poll draws every source in one transaction; here each
        source is drawn by a session of its own, in the same rotating order,
        and the poll ends at the first source that got rows (the worker polls
        again at once, from the next source, while slots are free). The rows
        and their order are the same; each single-draw session is one
        autocommit statement. When the probe reports an expired lease, the
        poll is the protocol's full session: recovery, then every draw, in
        one transaction.
        """
        state = self.state
        order = self._rotate()
        now = time.monotonic()
        # The probe answers two questions: is anything due (skipped when the
        # last draw came back full or LISTEN just said so: the draws answer
        # that themselves), and has a lease expired (asked at least once per
        # poll interval, as often as an idle worker asks it).
        if not (state.last_full or hinted) or now - state.probed_at >= self.poll_s:
            probe = self.store.probe_claim(self.queues, self.names, leaseless=self._leaseless_due(now))
            state.probed_at = now
            if not probe.any:
                state.last_full = False
                state.was_idle = True
                return []
            if probe.expired:
                full = self._request(probe=probe, recover=None, single_draw=len(order) == 1)
                drawn = self._session(order, full, remaining)
                state.was_idle = not drawn
                return drawn
        order = self._first_choice(order, now, hinted)
        state.due_name = None
        for source in order:
            drawn = self._session([source], self.one_draw, remaining)
            if drawn:
                state.was_idle = False
                state.productive_at[drawn[0][0].names] = now
                return drawn
        state.last_full = False
        state.was_idle = True
        return []

    def _rotate(self) -> list[Source]:
        """The sources in this poll's order, starting one further along than the last.

        Rotating keeps one name's backlog from taking every free slot. The
        next poll starts after the first source that actually got rows (see
        ``_session``): plain one-step rotation would hand every poll that
        starts on an empty source to the same next busy one.
        """
        sources = self.sources
        start = self.state.cursor % len(sources)
        self.state.cursor = (start + 1) % len(sources)
        return sources[start:] + sources[:start]

    def _leaseless_due(self, now: float) -> bool:
        """Whether this probe should look for running rows with no lease (once per lease period).

        A foreign writer's row like that is treated as an expired lease; the
        check reads every running row, so it runs as often as an ordinary
        lease can expire, not on every probe.
        """
        if now - self.state.leaseless_at < self.lease_ms / 1000:
            return False
        self.state.leaseless_at = now
        return True

    def _first_choice(self, order: list[Source], now: float, hinted: bool) -> list[Source]:
        """Reorder a poll that skipped the probe or found work due, by what earlier polls learned."""
        state = self.state
        if state.last_full:
            # Busy: sources that came back empty moments ago go last, so the
            # poll usually ends at its first draw.
            fresh = [s for s in order if state.empty_until.get(s.names, 0.0) <= now]
            return fresh + [s for s in order if s not in fresh]
        if state.due_name is not None:
            # Woken for a delayed task coming due: draw its source first.
            due = state.due_name
            return sorted(order, key=lambda s: due not in s.names)
        if hinted and state.was_idle:
            # Woken from idle by LISTEN: try the source that had work most
            # recently first (rotation resumes with the next poll; nothing
            # competes for the slots of an idle worker).
            return sorted(order, key=lambda s: -state.productive_at.get(s.names, 0.0))
        return order

    # ---- one session ---------------------------------------------------------
    def _session(self, order: list[Source], request: ClaimRequest, remaining: int | None) -> Drawn:
        """Run one claim session drawing the sources of ``order``, each within the budgets."""
        state = self.state
        sources = self.sources
        budgets = self.budgets
        drawn: Drawn = []
        full = [False]
        hold_until = time.monotonic() + EMPTY_SOURCE_HOLD_S
        # Short names drawn once more to claim ahead: then the session draws twice.
        extra = self._ahead_only(order)
        if extra and request.single_draw:
            request = self.ahead_draws

        # Called by the store inside the session (again if the session is
        # retried, so it starts over each time).
        def plan(draw: Draw) -> None:
            drawn.clear()
            full[0] = False
            left = budgets.free()
            drawn_calls = 0
            rows_left = remaining
            taken: dict[str, int] = {}
            for source in order + extra:
                if left <= 0 or (rows_left is not None and rows_left <= 0):
                    break
                ceiling = budgets.source_ceiling(source, taken, drawn_calls)
                quota = left if ceiling is None else min(ceiling, left)
                if quota <= 0:
                    continue
                limit = source.batch * quota
                if rows_left is not None:
                    limit = min(limit, rows_left)
                began = time.perf_counter()
                rows = draw(list(source.names), limit, source.fleet)
                if signals.claim_drawn.receivers:
                    signals.claim_drawn.send(
                        sender=Task, worker_id=self.worker_id, rows=len(rows),
                        duration_s=time.perf_counter() - began,
                    )
                if len(rows) == limit:
                    full[0] = True
                if not rows:
                    state.empty_until[source.names] = hold_until
                    continue
                state.empty_until.pop(source.names, None)
                calls = group(rows)
                if not drawn and source in sources:
                    state.cursor = (sources.index(source) + 1) % len(sources)
                drawn.append((source, calls))
                left -= len(calls)
                drawn_calls += len(calls)
                if rows_left is not None:
                    rows_left -= len(rows)
                if source.resource is not None:
                    taken[source.resource] = taken.get(source.resource, 0) + len(calls)
                if budgets.ahead and self._drew_long(rows):
                    # Nothing more waits behind a call that may run long.
                    left = min(left, budgets.free_slots(drawn_calls))

        if self.write_lock is not None:
            with self.write_lock:
                rows = self.store.claim_session(request, plan)
        else:
            rows = self.store.claim_session(request, plan)
        state.last_full = bool(rows) and full[0]
        if not rows:
            return []
        return drawn

    def _ahead_only(self, order: list[Source]) -> list[Source]:
        """The short names of sources held to their free slots, drawn once more to claim ahead.

        Automatic mode only: a source whose names are not all short takes only
        the free slots; its short names may still fill the rest.
        """
        if self.short_names is None or not self.budgets.ahead:
            return []
        extra = []
        for source in order:
            if source.restricted or self.budgets.claims_ahead(source):
                continue
            short = self.short_names(source.names)
            if short and self.state.empty_until.get(short, 0.0) <= time.monotonic():
                extra.append(Source(names=short, batch=source.batch))
        return extra

    def _drew_long(self, rows: list[Task]) -> bool:
        """Whether a draw brought a task of a name not seen to be short (automatic mode only)."""
        if self.short_names is None:
            return False
        names = tuple({row.name for row in rows})
        return len(self.short_names(names)) < len(names)

    # ---- between polls -------------------------------------------------------
    def idle_timeout(self, poll_s: float) -> float:
        """How long an idle wait may last: ``poll_s``, or less if a task is due sooner.

        Asked only when a claim came back empty, never on a claim that got
        rows; a failed read falls back to ``poll_s``. The due task's name is
        remembered, so the poll it wakes draws that task's source first.
        """
        self.state.due_name = None
        try:
            due = self.store.next_due(self.queues, self.names)
        except DatabaseError as exc:
            logger.debug("reading the next due time failed: %s", exc)
            return poll_s
        if due is None:
            return poll_s
        due_in_ms, self.state.due_name = due
        # One millisecond past run_at: the claim compares whole milliseconds.
        return min(poll_s, (due_in_ms + 1) / 1000)


def group(rows: list[Task]) -> list[CallRows]:
    """Cut rows into calls: grouped by name, chunked by that name's batch size."""
    by_name: dict[str, list[Task]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    calls: list[CallRows] = []
    for name, same in by_name.items():
        definition = get_task(name)
        size = (definition.batch if definition is not None else None) or 1
        for i in range(0, len(same), size):
            calls.append((definition, same[i : i + size]))
    return calls
