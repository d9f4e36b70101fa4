"""The PostgreSQL claim cursor (store/postgres/claim_cursor.py): a claim starts
after this process's last leased row instead of at the queue's head.

The first half pins the cursor's own rules with a hand-turned clock; the
second runs claims on PostgreSQL under a pinned snapshot (the case the
cursor exists for), with a submit that commits late, and inside a caller's
transaction.
"""

from __future__ import annotations

import re
import threading
import time
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

import cairnq_django as cq
from cairnq_django.conf import get_config
from cairnq_django.models import Task
from cairnq_django.store import SubmitSpec
from cairnq_django.store.base import ClaimRequest
from cairnq_django.store.postgres.claim_cursor import (
    EXPIRED_LEASE_MARGIN_MS,
    HEAD_READ_INTERVAL_S,
    HEAD_RUN_AT_MS,
    HEAD_READ_SHARE,
    LATE_COMMIT_MARGIN_MS,
    DB_CLOCK_TRUST_S,
    ClaimCursors,
    ExpiryFloor,
    Start,
    statement_params,
)
from cairnq_django.store.sql_files import load
from tests.conftest import database_url
from tests.store.plans import buffers, explain_generic

LEASE_MS = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def row(task_id: str, *, queue: str = "q", priority: int = 0, run_at_ms: int, claimed_ms: int) -> Any:
    """What the cursor reads of a leased Task."""
    return SimpleNamespace(
        id=task_id, queue=queue, priority=priority, run_at_ms=run_at_ms, lease_until_ms=claimed_ms + LEASE_MS
    )


def draw(
    cursors: ClaimCursors,
    rows: list[Any],
    queues: tuple[str, ...] = ("q",),
    names: Any = None,
    took_s: float = 0.001,
    *,
    emptied: tuple[str, ...] = (),
) -> list[Start]:
    """One draw as the store makes it: ask where to start, then report the rows leased."""
    starts = cursors.starts(list(queues), names)
    cursors.advance(names, starts, rows, LEASE_MS, took_s, emptied=emptied)
    return starts


# ---- the rules ----------------------------------------------------------------
def test_a_first_draw_reads_from_the_head_and_the_next_starts_after_its_last_row() -> None:
    cursors = ClaimCursors(Clock())
    # A backlog: claimed a minute after it was due. Claim order is priority
    # DESC, run_at_ms, id: the last row is the lowest priority's latest.
    leased = [
        row("task_b", priority=5, run_at_ms=1_000, claimed_ms=61_000),
        row("task_c", priority=0, run_at_ms=2_000, claimed_ms=61_000),
        row("task_a", priority=0, run_at_ms=1_000, claimed_ms=61_000),
    ]
    assert draw(cursors, leased) == [Start.head("q")]
    assert cursors.starts(["q"], None) == [Start("q", 0, 2_000, "task_c")]


def test_a_row_claimed_within_the_margin_of_its_run_at_leaves_room_for_late_commits() -> None:
    cursors = ClaimCursors(Clock())
    draw(cursors, [row("task_a", run_at_ms=10_000, claimed_ms=10_020)])
    # Submits whose transaction began up to the margin before the claim are read again.
    assert cursors.starts(["q"], None) == [Start("q", 0, 10_020 - LATE_COMMIT_MARGIN_MS, "")]


def test_every_draw_reads_from_the_head_once_a_second_and_an_empty_draw_keeps_the_cursor() -> None:
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)])
    clock.now += HEAD_READ_INTERVAL_S * 0.9
    assert draw(cursors, []) == [Start("q", 0, 1_000, "task_a")]  # nothing leased: the cursor stays
    clock.now += HEAD_READ_INTERVAL_S * 0.2
    assert draw(cursors, []) == [Start.head("q")]  # a second since the last head read
    # That head read restarts the interval, even though it leased nothing.
    assert cursors.starts(["q"], None) == [Start("q", 0, 1_000, "task_a")]


def test_an_empty_draw_that_asked_for_more_moves_its_cursor_to_the_database_clock() -> None:
    # Names with no rows beside another name's backlog: without this, every
    # draw of them read from the head and walked the whole backlog.
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)], names=["bulk"])  # the clock: 60_000 at 100.0
    clock.now += 0.5
    assert draw(cursors, [], names=["other"], took_s=0.1, emptied=("q",)) == [Start.head("q")]
    # The draw began 0.4 s after the clock was read: at 60_400 at the earliest.
    assert cursors.starts(["q"], ["other"]) == [Start("q", 0, 60_400 - LATE_COMMIT_MARGIN_MS, "")]
    # A draw that leased as many rows as it asked for, or of a paused queue, proves nothing.
    draw(cursors, [], names=["third"], took_s=0.1)
    assert cursors.starts(["q"], ["third"]) == [Start.head("q")]
    # The cursor follows the clock, and the head is still read as often as
    # its cost allows (that first draw read it in 0.1 s).
    clock.now += 0.2
    draw(cursors, [], names=["other"], took_s=0.1, emptied=("q",))
    assert cursors.starts(["q"], ["other"]) == [Start("q", 0, 60_600 - LATE_COMMIT_MARGIN_MS, "")]
    clock.now += max(HEAD_READ_INTERVAL_S, 0.1 / HEAD_READ_SHARE)
    assert cursors.starts(["q"], ["other"]) == [Start("q", 0, HEAD_RUN_AT_MS, "")]


def test_an_empty_draw_with_no_recent_clock_reading_keeps_reading_from_the_head() -> None:
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [], names=["other"], emptied=("q",))  # nothing read the database clock yet
    assert cursors.starts(["q"], ["other"]) == [Start.head("q")]
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)], names=["bulk"])
    clock.now += DB_CLOCK_TRUST_S + 1
    draw(cursors, [], names=["other"], emptied=("q",))  # that reading is too old to build on
    assert cursors.starts(["q"], ["other"]) == [Start.head("q")]


def test_a_queue_a_draw_found_empty_moves_to_the_clock_of_the_rows_it_leased_elsewhere() -> None:
    cursors = ClaimCursors(Clock())
    draw(cursors, [row("task_a", queue="q", run_at_ms=1_000, claimed_ms=60_000)], queues=("q", "r"), emptied=("r",))
    assert cursors.starts(["q", "r"], None) == [
        Start("q", 0, 1_000, "task_a"), Start("r", 0, 60_000 - LATE_COMMIT_MARGIN_MS, ""),
    ]


def test_reads_from_the_head_are_spaced_out_when_they_cost_more_than_a_share_of_the_time() -> None:
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)], took_s=0.2)  # a head read of 200 ms
    clock.now += HEAD_READ_INTERVAL_S
    assert cursors.starts(["q"], None) == [Start("q", 0, 1_000, "task_a")]
    clock.now += 0.2 / HEAD_READ_SHARE - HEAD_READ_INTERVAL_S
    assert cursors.starts(["q"], None) == [Start.head("q")]
    draw(cursors, [], took_s=0.001)  # a cheap one: back to once a second
    clock.now += HEAD_READ_INTERVAL_S
    assert cursors.starts(["q"], None) == [Start.head("q")]


def test_each_queue_and_name_filter_has_its_own_cursor() -> None:
    cursors = ClaimCursors(Clock())
    draw(
        cursors,
        [
            row("task_a", queue="q", run_at_ms=1_000, claimed_ms=60_000),
            row("task_b", queue="r", run_at_ms=2_000, claimed_ms=60_000),
        ],
        queues=("q", "r", "s"),
        names=["x", "y"],
    )
    assert cursors.starts(["q", "r", "s"], ["y", "x"]) == [
        Start("q", 0, 1_000, "task_a"), Start("r", 0, 2_000, "task_b"), Start.head("s"),
    ]
    assert cursors.starts(["q"], None) == [Start.head("q")]
    assert cursors.starts(["q"], ["x"]) == [Start.head("q")]


def test_a_probe_starts_where_the_draws_of_all_its_names_start() -> None:
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [row("task_b", run_at_ms=2_000, claimed_ms=60_000)], names=["batch"])
    # A name no draw has a cursor for (its rows may sort anywhere): from the head.
    assert cursors.probe_starts(["q"], ["a", "b", "batch"]) == [Start.head("q")]
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)], names=["a", "b"])
    # Every name drawn, at one priority: the earliest of their cursors.
    assert cursors.probe_starts(["q"], ["a", "b", "batch"]) == [Start("q", 0, 1_000, "task_a")]
    # A draw due to read from the head: so does the probe.
    clock.now += HEAD_READ_INTERVAL_S
    draw(cursors, [row("task_c", run_at_ms=3_000, claimed_ms=60_000)], names=["a", "b"])
    assert cursors.probe_starts(["q"], ["a", "b", "batch"]) == [Start.head("q")]
    # Cursors at different priorities share no range to skip: from the head.
    draw(cursors, [row("task_d", priority=3, run_at_ms=500, claimed_ms=60_000)], names=["batch"])
    assert cursors.probe_starts(["q"], ["a", "b", "batch"]) == [Start.head("q")]


def probe_row(
    queue: str = "q", *, now_ms: int, next: tuple[int, int, str] | None = None, paused: bool = False
) -> dict[str, Any]:
    """One queue's row of claimable_probe.sql; ``next`` is (priority, run_at_ms, id)."""
    return {
        "queue": queue, "paused": paused, "now_ms": now_ms,
        "next_priority": None if next is None else next[0],
        "next_run_at_ms": None if next is None else next[1],
        "next_id": None if next is None else next[2],
    }


def probe(cursors: ClaimCursors, rows: list[dict[str, Any]], names: Any = None, took_s: float = 0.001) -> list[Start]:
    """One probe as the store makes it: ask where to start, then report what it read."""
    queues = [r["queue"] for r in rows]
    starts = cursors.probe_starts(queues, names)
    cursors.probed(names, starts, rows, took_s)
    return starts


def test_a_probe_that_finds_nothing_moves_the_cursor_to_its_clock_less_the_margin() -> None:
    # Under a held snapshot, what the other workers claimed since this one's
    # last row is walked by every draw from its cursor; a probe walks it once.
    cursors = ClaimCursors(Clock())
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)])
    assert probe(cursors, [probe_row(now_ms=90_000)]) == [Start("q", 0, 1_000, "task_a")]
    assert cursors.starts(["q"], None) == [Start("q", 0, 90_000 - LATE_COMMIT_MARGIN_MS, "")]


def test_a_probe_moves_the_cursor_up_to_the_first_queued_row_not_past_it() -> None:
    cursors = ClaimCursors(Clock())
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)])
    # Due or not (a delayed task is the first row too): the cursor stops at it.
    probe(cursors, [probe_row(now_ms=90_000, next=(0, 50_000, "task_b"))])
    assert cursors.starts(["q"], None) == [Start("q", 0, 50_000, "task_b")]
    probe(cursors, [probe_row(now_ms=95_000, next=(0, 120_000, "task_c"))])
    assert cursors.starts(["q"], None) == [Start("q", 0, 95_000 - LATE_COMMIT_MARGIN_MS, "")]


def test_a_paused_queue_keeps_its_cursor_so_resuming_reads_its_backlog() -> None:
    cursors = ClaimCursors(Clock())
    draw(cursors, [row("task_a", run_at_ms=1_000, claimed_ms=60_000)])
    probe(cursors, [probe_row(now_ms=90_000, paused=True)])
    assert cursors.starts(["q"], None) == [Start("q", 0, 1_000, "task_a")]


def test_a_probe_from_the_head_counts_as_the_head_read_and_moves_the_cursor_back() -> None:
    clock = Clock()
    cursors = ClaimCursors(clock)
    draw(cursors, [row("task_a", priority=3, run_at_ms=10_000, claimed_ms=60_000)])
    clock.now += HEAD_READ_INTERVAL_S
    # From the head, at the cursor's priority (the ranges above and below it are read whole).
    assert probe(cursors, [probe_row(now_ms=61_000, next=(3, 5_000, "task_late"))]) == [Start("q", 3, -(2**63), "")]
    # A row committed after the cursor passed it: the cursor goes back to it, and no
    # draw reads from the head for another interval.
    assert cursors.starts(["q"], None) == [Start("q", 3, 5_000, "task_late")]


def test_a_probe_moves_the_cursor_to_the_priority_its_rows_are_at() -> None:
    # The probe's first cursor starts at the head's priority; the rows are at
    # 5, and every probe would otherwise read priority 5 whole as "above".
    cursors = ClaimCursors(Clock())
    probe(cursors, [probe_row(now_ms=90_000, next=(5, 80_000, "task_a"))], names=["a"])
    assert cursors.probe_starts(["q"], ["a"]) == [Start("q", 5, 80_000, "task_a")]
    probe(cursors, [probe_row(now_ms=95_000)], names=["a"])  # none left: the clock, same priority
    assert cursors.probe_starts(["q"], ["a"]) == [Start("q", 5, 95_000 - LATE_COMMIT_MARGIN_MS, "")]


def test_a_probe_of_names_no_draw_has_gets_a_cursor_of_its_own() -> None:
    cursors = ClaimCursors(Clock())
    assert probe(cursors, [probe_row(now_ms=90_000)], names=["a", "b"]) == [Start.head("q")]
    assert cursors.probe_starts(["q"], ["b", "a"]) == [Start("q", 0, 90_000 - LATE_COMMIT_MARGIN_MS, "")]
    # The draws of those names keep their own cursors.
    assert cursors.starts(["q"], ["a"]) == [Start.head("q")]


def test_a_probe_looks_for_expired_leases_since_the_last_probe_that_found_none() -> None:
    floor = ExpiryFloor()
    assert floor.since(full=False) == HEAD_RUN_AT_MS  # no probe yet
    floor.probed(90_000, expired=False)
    assert floor.since(full=False) == 90_000 - EXPIRED_LEASE_MARGIN_MS
    assert floor.since(full=True) == HEAD_RUN_AT_MS  # the once-a-lease-period probe reads them all
    floor.probed(95_000, expired=True)  # recovery comes next; the next probe reads the same range
    assert floor.since(full=False) == 90_000 - EXPIRED_LEASE_MARGIN_MS


# ---- on PostgreSQL ----------------------------------------------------------------
@pytest.fixture
def pg_store(store: Any, dialect: str) -> Any:
    if dialect != "postgres":
        pytest.skip("the claim cursor is PostgreSQL's: SQLite's b-trees keep no old row versions")
    return store


def pinned_snapshot() -> Any:
    """An idle REPEATABLE READ session holding its snapshot (each test reads a queue of its own)."""
    pin = psycopg.connect(database_url().replace("postgres://", "postgresql://", 1))
    pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    pin.execute("SELECT 1")
    return pin


def submit_many(store: Any, n: int, name: str = "job", queue: str = "default") -> list[str]:
    return [t.id for t in store.submit_many([SubmitSpec(name=name, payload_json="{}", queue=queue) for _ in range(n)])]


def claim_buffers(start: Start, limit: int = 10, names: list[str] | None = None) -> int:
    """Shared buffers one claim of ``start.queue`` (of ``names``) reads when it starts at ``start`` (rolled back)."""
    params = {
        "queue": start.queue, "names": names, "worker_id": "w_explain", "lease_ms": LEASE_MS, "limit": limit,
        "synchronous_commit": None, **statement_params([start]),
    }
    with connection.cursor() as cursor:
        cursor.execute("BEGIN")
        try:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + load("postgres", "claim_one_queue"), params)
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("ROLLBACK")
    root = plan[0]["Plan"] if isinstance(plan, list) else plan
    # The pick alone: the UPDATE's own index writes are the same either way.
    [picked] = [node for node in root["Plans"] if node.get("Subplan Name") == "CTE picked"]
    return int(picked["Shared Hit Blocks"]) + int(picked["Shared Read Blocks"])


def test_under_a_pinned_snapshot_a_claim_does_not_walk_the_rows_claimed_before_it(pg_store: Any) -> None:
    # An idle REPEATABLE READ session keeps every claimed row's queued
    # version alive in cairnq_tasks_claim_idx; a claim from the head fetches
    # each one's heap tuple, a claim from the cursor starts past them.
    pin = pinned_snapshot()
    try:
        submit_many(pg_store, 5_000, queue="pinned")
        claimed = 0
        while claimed < 4_000:
            claimed += len(pg_store.claim(["pinned"], "w1", limit=50, lease_ms=LEASE_MS))
        [start] = pg_store.claim_cursors.starts(["pinned"], None)
        assert not start.from_head
        from_cursor, from_head = claim_buffers(start), claim_buffers(Start.head("pinned"))
        assert from_cursor * 5 < from_head, (from_cursor, from_head)
        # And the cursor's claims take exactly the rows the head's would.
        rest = pg_store.claim(["pinned"], "w1", limit=2_000, lease_ms=LEASE_MS)
        assert len(rest) == 1_000
    finally:
        pin.close()


def test_beside_another_names_backlog_a_draw_that_finds_nothing_stops_walking_it(pg_store: Any) -> None:
    # A worker draws a batch name on its own and its other names together;
    # the draw of the others found none, read from the head every time and
    # walked the whole backlog of the batch name (32 ms a draw at 75,000 rows).
    clock = Clock()
    pg_store.claim_cursors = ClaimCursors(clock)
    submit_many(pg_store, 5_000, name="bulk", queue="beside")
    time.sleep(LATE_COMMIT_MARGIN_MS / 1000 * 2)  # the backlog is older than the margin, as a backlog is
    assert len(pg_store.claim(["beside"], "w1", names=["bulk"], limit=10, lease_ms=LEASE_MS)) == 10
    clock.now += 0.01
    others = ["other", "another"]
    assert pg_store.claim(["beside"], "w1", names=others, limit=10, lease_ms=LEASE_MS) == []
    [start] = pg_store.claim_cursors.starts(["beside"], others)
    assert not start.from_head
    # Never dearer than from the head; how much cheaper depends on the plan (a
    # planner that knows the names' statistics may read another index from the head).
    assert claim_buffers(start, names=others) <= claim_buffers(Start.head("beside"), names=others)
    # A task of those names submitted now is the next draw's, without a read from the head.
    clock.now += 0.01
    [task_id] = submit_many(pg_store, 1, name="other", queue="beside")
    assert [t.id for t in pg_store.claim(["beside"], "w1", names=others, limit=10, lease_ms=LEASE_MS)] == [task_id]


def test_under_a_pinned_snapshot_a_probe_moves_the_cursor_past_what_other_workers_claimed(pg_store: Any) -> None:
    # A worker whose draws come back empty (the others were first) would walk
    # everything claimed since its last row on every draw; its probe walks it
    # once and moves the cursor past it.
    pin = pinned_snapshot()
    try:
        submit_many(pg_store, 5_000, queue="pinned_probe")
        mine = pg_store.claim_cursors
        assert len(pg_store.claim(["pinned_probe"], "w1", limit=10, lease_ms=LEASE_MS)) == 10
        pg_store.claim_cursors = ClaimCursors()  # another worker process
        claimed = 0
        while claimed < 4_000:
            claimed += len(pg_store.claim(["pinned_probe"], "w2", limit=50, lease_ms=LEASE_MS))
        pg_store.claim_cursors = mine
        [behind] = mine.starts(["pinned_probe"], None)
        assert pg_store.probe_claim(["pinned_probe"], None, leaseless=False).due
        [start] = mine.starts(["pinned_probe"], None)
        assert not start.from_head and (start.run_at_ms, start.id) > (behind.run_at_ms, behind.id)
        assert claim_buffers(start) * 5 < claim_buffers(behind), (start, behind)
        # And the claims from there take exactly the rows left.
        assert len(pg_store.claim(["pinned_probe"], "w1", limit=2_000, lease_ms=LEASE_MS)) == 990
    finally:
        pin.close()


def probe_buffers(expired_from_ms: int) -> int:
    """Shared buffers the probe's expired-lease half reads from ``expired_from_ms``."""
    params = {
        "queues": ["nothing_here"], "names": None, "leaseless": False, "expired_from_ms": expired_from_ms,
        **statement_params([Start.head("nothing_here")]),
    }
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + load("postgres", "claimable_probe"), params)
        plan = cursor.fetchone()[0]
    root = plan[0]["Plan"] if isinstance(plan, list) else plan
    [expired] = [node for node in root["Plans"] if node.get("Subplan Name") == "CTE expired"]
    return int(expired["Shared Hit Blocks"]) + int(expired["Shared Read Blocks"])


def test_under_a_pinned_snapshot_a_probe_skips_the_leases_that_ran_out_before_its_floor(pg_store: Any) -> None:
    # Each settled task's running version keeps its lease index entry while
    # the snapshot is held; a probe from the floor must not walk them (nor
    # read the status index instead, where the floor bounds nothing).
    pin = pinned_snapshot()
    try:
        submit_many(pg_store, 3_000, queue="pinned_leases")
        for _ in range(60):
            rows = pg_store.claim(["pinned_leases"], "w1", limit=50, lease_ms=1)
            pg_store.complete_many("w1", [(row.id, None) for row in rows])
        time.sleep(0.05)
        with connection.cursor() as cursor:
            cursor.execute("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
            now_ms = cursor.fetchone()[0]
        from_floor, from_lowest = probe_buffers(now_ms), probe_buffers(HEAD_RUN_AT_MS)
        assert from_floor * 5 < from_lowest, (from_floor, from_lowest)
    finally:
        pin.close()


def test_under_a_pinned_snapshot_the_next_due_time_does_not_read_the_rows_claimed_before_it(pg_store: Any) -> None:
    # An idle worker asks when the next task is due after every empty poll.
    # The entries a held snapshot keeps are all of rows that were due when
    # claimed: the walk tests "not yet due" on each index entry, so it never
    # reads their rows (reading each one cost 22 ms a call in fleet_scale.py
    # xmin). Timed as the claim connection plans it, under statistics taken
    # with only finished rows in the table and again with the backlog in it:
    # either once sent the walk through the status index and a sort.
    submit_many(pg_store, 2_000, queue="finished_elsewhere")
    while rows := pg_store.claim(["finished_elsewhere"], "w1", limit=500, lease_ms=LEASE_MS):
        pg_store.complete_many("w1", [(row.id, None) for row in rows])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE cairnq_tasks")
    pin = pinned_snapshot()
    try:
        submit_many(pg_store, 3_000, queue="pinned_due")
        pg_store.submit_many([SubmitSpec(name="job", payload_json="{}", queue="pinned_due", delay_ms=3_600_000)])
        claimed = 0
        while claimed < 3_000:
            claimed += len(pg_store.claim(["pinned_due"], "w1", limit=100, lease_ms=LEASE_MS))
        params = {"queues": ["pinned_due"], "names": ["job"], "max_steps": 64}
        read = []
        for statistics in ("only finished rows", "the backlog too"):
            if statistics == "the backlog too":
                with connection.cursor() as cursor:
                    cursor.execute("ANALYZE cairnq_tasks")
            due = pg_store.next_due(["pinned_due"], ["job"])
            assert due is not None and due[1] == "job" and 3_590_000 < due[0] <= 3_600_000, due
            read.append(buffers(explain_generic("next_run_at", params, claim_connection=True, analyze=True)))
        # About 40 each; reading each claimed row's version read over 600.
        assert max(read) < 300, read
    finally:
        pin.close()


def test_an_expired_lease_is_found_by_the_next_probe_and_an_older_one_by_the_full_probe(pg_store: Any) -> None:
    submit_many(pg_store, 1, queue="leases")
    assert not pg_store.probe_claim(["leases"], None, leaseless=False).expired  # sets the floor
    [task] = pg_store.claim(["leases"], "w1", lease_ms=50)
    time.sleep(0.2)
    assert pg_store.probe_claim(["leases"], None, leaseless=False).expired
    # A lease that ran out long before the floor (a writer whose clock is
    # behind): not for the probes in between, but for the full one.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE cairnq_tasks SET lease_until_ms = 1000 WHERE id = %s", [task.id])
    pg_store.expiry_floor.probed(int(time.time() * 1000), expired=False)
    assert not pg_store.probe_claim(["leases"], None, leaseless=False).expired
    assert pg_store.probe_claim(["leases"], None, leaseless=True).expired


def test_a_probe_follows_the_rows_to_their_priority(pg_store: Any) -> None:
    pg_store.submit_many([SubmitSpec(name="job", payload_json="{}", queue="urgent", priority=5) for _ in range(30)])
    time.sleep(LATE_COMMIT_MARGIN_MS / 1000 * 2)  # past the margin: the cursor may reach the rows
    pg_store.claim(["urgent"], "w2", limit=20, lease_ms=LEASE_MS)  # taken by another worker, say
    pg_store.claim_cursors = ClaimCursors()
    assert pg_store.probe_claim(["urgent"], ["job"], leaseless=False).due
    [start] = pg_store.claim_cursors.probe_starts(["urgent"], ["job"])
    # At priority 5, past the 20 claimed: the next probe reads neither them nor priority 5 whole.
    assert (start.priority, start.from_head) == (5, False)
    claimed_last = max(Task.objects.filter(queue="urgent", status="running").values_list("run_at_ms", "id"))
    assert (start.run_at_ms, start.id) > claimed_last


def test_a_paused_queues_backlog_is_claimed_as_soon_as_it_resumes(pg_store: Any) -> None:
    clock = Clock()  # stands still: no read from the head comes to help
    pg_store.claim_cursors = ClaimCursors(clock)
    submit_many(pg_store, 1, queue="pausing")
    assert len(pg_store.claim(["pausing"], "w1", lease_ms=LEASE_MS)) == 1
    cq.pause_queue("pausing")
    waiting = submit_many(pg_store, 3, queue="pausing")
    time.sleep(LATE_COMMIT_MARGIN_MS / 1000 * 2)
    assert not pg_store.probe_claim(["pausing"], None, leaseless=False).due
    cq.resume_queue("pausing")
    assert pg_store.probe_claim(["pausing"], None, leaseless=False).due
    assert sorted(t.id for t in pg_store.claim(["pausing"], "w1", limit=10, lease_ms=LEASE_MS)) == sorted(waiting)


def test_a_draw_of_a_paused_queue_keeps_its_cursor_so_resuming_claims_the_backlog_at_once(pg_store: Any) -> None:
    clock = Clock()
    pg_store.claim_cursors = ClaimCursors(clock)
    submit_many(pg_store, 4, queue="held")
    time.sleep(LATE_COMMIT_MARGIN_MS / 1000 * 2)
    assert len(pg_store.claim(["held"], "w1", lease_ms=LEASE_MS)) == 1
    before = pg_store.claim_cursors.starts(["held"], None)
    cq.pause_queue("held")
    clock.now += 0.01
    # As a busy worker draws: no probe first (a probe would see the pause and skip the draw).
    request = ClaimRequest(["held"], "w1", LEASE_MS, None, probe=False, recover=False)
    assert not pg_store.claim_session(request, lambda session: session(None, 10))  # paused: none, holds three
    assert pg_store.claim_cursors.starts(["held"], None) == before
    cq.resume_queue("held")
    clock.now += 0.01  # no read from the head comes to help
    assert len(pg_store.claim(["held"], "w1", limit=10, lease_ms=LEASE_MS)) == 3


def test_a_submit_that_commits_after_later_rows_were_claimed_waits_at_most_for_the_next_head_read(
    pg_store: Any,
) -> None:
    clock = Clock()
    pg_store.claim_cursors = ClaimCursors(clock)
    submitted, release, done = threading.Event(), threading.Event(), threading.Event()
    late: list[str] = []

    def slow_request() -> None:
        # A request that submits, then works on inside its transaction.
        try:
            with transaction.atomic():
                late.extend(submit_many(pg_store, 1, "late"))
                submitted.set()
                release.wait(10)
        finally:
            connection.close()
            done.set()

    threading.Thread(target=slow_request, daemon=True).start()
    assert submitted.wait(10)
    time.sleep(LATE_COMMIT_MARGIN_MS / 1000 * 3)
    early = submit_many(pg_store, 1, "early")
    assert [t.id for t in pg_store.claim(["default"], "w1", lease_ms=LEASE_MS)] == early
    release.set()
    assert done.wait(10)
    # Committed now, due before the row the cursor stands on: stepped past ...
    assert pg_store.claim(["default"], "w1", lease_ms=LEASE_MS) == []
    # ... until this process's next read from the head.
    clock.now += HEAD_READ_INTERVAL_S
    assert [t.id for t in pg_store.claim(["default"], "w1", lease_ms=LEASE_MS)] == late


def test_a_claim_inside_the_callers_transaction_reads_from_the_head_and_leaves_no_cursor(pg_store: Any) -> None:
    # now() stands still inside a transaction: a task submitted after the
    # claim shares the claimed row's run_at_ms and may sort before it.
    with transaction.atomic():
        submit_many(pg_store, 3)
        request = ClaimRequest(["default"], "w1", LEASE_MS, None)
        assert len(pg_store.claim_session(request, lambda session: session(None, 2)) or []) == 2
        assert pg_store.claim_cursors.starts(["default"], None) == [Start.head("default")]
        submit_many(pg_store, 3)
        assert pg_store.probe_claim(["default"], None).due
        assert len(pg_store.claim(["default"], "w1", limit=10, lease_ms=LEASE_MS)) == 4


def test_a_worker_connection_plans_claims_on_the_claim_index_even_from_an_empty_table(pg_store: Any) -> None:
    # The plan a worker's connection makes of each claim is kept for the
    # connection's life; one made on an empty table (a fresh install) must
    # not be a sequential scan the table then grows under.
    if get_config()["TRANSACTION_POOLING"]:
        pytest.skip("behind a transaction pooler nothing is prepared and no session SET is sent")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE cairnq_tasks")  # empty: no pages, no rows
    connection.close()
    pg_store._reuse_claim_plans()
    names: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", numbered, load("postgres", "claim_one_queue"))
    params = {
        "queue": "default", "names": None, "worker_id": "w1", "lease_ms": LEASE_MS, "limit": 10,
        "synchronous_commit": None, **statement_params([Start.head("default")]),
    }
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "force_generic_plan"
        cursor.execute("PREPARE claim_on_empty AS " + text.replace("%", "%%"))
        cursor.execute(
            "EXPLAIN EXECUTE claim_on_empty(" + ", ".join(["%s"] * len(names)) + ")", [params[n] for n in names]
        )
        plan = "\n".join(r[0] for r in cursor.fetchall())
        cursor.execute("DEALLOCATE claim_on_empty")
    assert "Seq Scan on cairnq_tasks" not in plan, plan
    assert "cairnq_tasks_claim_idx" in plan, plan
