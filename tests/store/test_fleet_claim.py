"""The fleet-limited claim on the real database: what one draw admits, per limit kind.

Each test drives ``store.claim_session`` as a worker's planner does, with
several worker ids standing for several workers; the worker-process tests
(test_fleet_workers.py) race real processes against the same rules.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import DatabaseError, connections, transaction

import cairnq_django as cairnq
from cairnq_django.migrations._claim_functions import drop, replace
from cairnq_django.models import FleetStart, Task
from cairnq_django.protocol.limits import FleetLimits, Rate, parse_rate
from cairnq_django.store.base import ClaimRequest
from cairnq_django.store.claim import draw_limited
from cairnq_django.store.missing_schema import is_missing_table
from cairnq_django.tasks.registry import TaskDefinitionError, get_task, task, unregister
from cairnq_django.worker.budgets import fleet_limits

pytestmark = pytest.mark.usefixtures("cairnq_db")


def claim(store: Any, fleet: FleetLimits, limit: int, worker: str = "w1", lease_ms: int = 30_000) -> list[Any]:
    request = ClaimRequest(["default"], worker, lease_ms, [fleet.name])
    return store.claim_session(request, lambda draw: draw([fleet.name], limit, fleet)) or []


def submit(name: str, n: int, **payload: Any) -> list[str]:
    return [cairnq.submit(name, {"i": i, **payload}).id for i in range(n)]


def key_of(row: Any) -> str:
    return row.metadata["cairnq_django"]["limit_key"]


def test_global_concurrency_admits_up_to_the_limit_across_workers(store: Any) -> None:
    fleet = FleetLimits(name="t.charge", concurrency=3)
    submit("t.charge", 10)
    first = claim(store, fleet, 2, "w1")
    second = claim(store, fleet, 8, "w2")
    assert (len(first), len(second)) == (2, 1)
    assert claim(store, fleet, 8, "w3") == []
    store.complete(first[0].id, "w1", None)
    again = claim(store, fleet, 8, "w3")
    assert len(again) == 1


def test_rows_come_back_in_claim_order(store: Any) -> None:
    fleet = FleetLimits(name="t.ordered", concurrency=10)
    low = cairnq.submit("t.ordered", {}, priority=0).id
    high = cairnq.submit("t.ordered", {}, priority=5).id
    later = cairnq.submit("t.ordered", {}, priority=-1).id
    assert [row.id for row in claim(store, fleet, 10)] == [high, low, later]


def test_an_expired_lease_frees_its_slot_and_not_before(store: Any) -> None:
    fleet = FleetLimits(name="t.lease", concurrency=1)
    submit("t.lease", 3)
    held = claim(store, fleet, 1, "dead", lease_ms=600)
    assert len(held) == 1
    assert claim(store, fleet, 1, "w2") == []
    time.sleep(0.7)
    # Not recovered yet (no sweep ran): the row is still "running", but its lease is over.
    assert store.get(held[0].id).status == "running"
    assert len(claim(store, fleet, 1, "w2")) == 1


def test_per_key_limit_takes_one_per_key(store: Any) -> None:
    definition = task("t.sync", global_concurrency=1, limit_key="customer")(lambda ctx, payload: None)
    try:
        for customer in ("a", "b", "c"):
            submit("t.sync", 4, customer=customer)
        fleet = fleet_limits(definition, {})
        assert fleet is not None and fleet.keyed
        rows = claim(store, fleet, 8)
        assert sorted(key_of(row) for row in rows) == ["a", "b", "c"]
        assert claim(store, fleet, 8, "w2") == []
        store.complete(rows[0].id, "w1", None)
        assert [key_of(row) for row in claim(store, fleet, 8, "w2")] == [key_of(rows[0])]
    finally:
        unregister("t.sync")


def test_a_saturated_key_does_not_hide_the_keys_behind_it(store: Any) -> None:
    definition = task("t.fair", global_concurrency=1, limit_key="customer")(lambda ctx, payload: None)
    try:
        cairnq.submit_many([("t.fair", {"customer": "big", "i": i}) for i in range(2_000)])
        submit("t.fair", 3, customer="small")
        fleet = fleet_limits(definition, {})
        assert fleet is not None
        # The head of the queue is all "big", of which one may run: the draw reads on
        # past "big", 2,000 rows, to the next key.
        big, small = claim(store, fleet, 4)
        assert (key_of(big), key_of(small)) == ("big", "small")
        assert claim(store, fleet, 4, "w2") == []  # both keys are at their limit
        store.complete(small.id, "w1", None)
        # "big" is at its limit: skipped while reading, so "small" is found again.
        assert [key_of(row) for row in claim(store, fleet, 4, "w2")] == ["small"]
    finally:
        unregister("t.fair")


def test_a_key_with_room_for_several_reads_on_past_a_first_read_of_one_key(store: Any) -> None:
    definition = task("t.wide", global_concurrency=2, limit_key="customer")(lambda ctx, payload: None)
    try:
        cairnq.submit_many([("t.wide", {"customer": "a", "i": i}) for i in range(40)])
        submit("t.wide", 5, customer="b")
        fleet = fleet_limits(definition, {})
        assert fleet is not None
        # The first read (several rows per row wanted) holds only "a": the draw reads on
        # past it, and each key gets its two slots.
        assert sorted(key_of(row) for row in claim(store, fleet, 4)) == ["a", "a", "b", "b"]
        assert claim(store, fleet, 4, "w2") == []
    finally:
        unregister("t.wide")


def test_a_rate_limit_bounds_starts_in_any_window(store: Any) -> None:
    fleet = FleetLimits(name="t.rated", rate=parse_rate("4/s"))
    submit("t.rated", 20)
    first = claim(store, fleet, 10)
    assert len(first) == 4
    for row in first:  # finished at once: only the window holds the next ones back
        store.complete(row.id, "w1", None)
    assert claim(store, fleet, 10, "w2") == []
    time.sleep(1.05)
    assert len(claim(store, fleet, 10, "w2")) == 4


def test_a_burst_spreads_the_rate_out(store: Any) -> None:
    fleet = FleetLimits(name="t.burst", rate=Rate(count=10, window_ms=1_000, burst=2))
    submit("t.burst", 20)
    assert len(claim(store, fleet, 10)) == 2  # at most 2 in any 200 ms
    assert claim(store, fleet, 10) == []
    time.sleep(0.25)
    assert len(claim(store, fleet, 10)) == 2


def test_a_global_resource_is_shared_by_every_name_that_declares_it(store: Any) -> None:
    first = FleetLimits(name="t.embed", resource="openai", resource_capacity=2)
    second = FleetLimits(name="t.complete", resource="openai", resource_capacity=2)
    submit("t.embed", 3)
    submit("t.complete", 3)
    assert len(claim(store, first, 1, "w1")) == 1
    assert len(claim(store, second, 5, "w2")) == 1
    assert claim(store, first, 5, "w3") == [] and claim(store, second, 5, "w3") == []


def test_a_batch_call_counts_as_one_unit(store: Any) -> None:
    fleet = FleetLimits(name="t.batch", batch=4, concurrency=2)
    submit("t.batch", 20)
    rows = claim(store, fleet, 40)
    assert len(rows) == 8  # two calls of four
    assert claim(store, fleet, 40, "w2") == []
    # The call's first row stands for it: settling the whole first call frees one unit.
    store.complete_many("w1", [(row.id, None) for row in rows[:4]])
    assert len(claim(store, fleet, 40, "w2")) == 4


def test_a_retried_task_is_counted_by_its_new_attempt_only(store: Any) -> None:
    fleet = FleetLimits(name="t.retry", concurrency=1)
    (task_id,) = submit("t.retry", 1)
    (row,) = claim(store, fleet, 1, "w1")
    store.fail(task_id, "w1", {"type": "Boom", "message": "x"}, retryable=True, delay_ms=0)
    (again,) = claim(store, fleet, 1, "w1")
    assert again.id == task_id and again.attempt == 2


def test_a_limited_draw_skips_a_paused_queue(store: Any) -> None:
    fleet = FleetLimits(name="t.paused", concurrency=5)
    submit("t.paused", 2)
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "INSERT INTO cairnq_django_queue_pause (queue, paused_at_ms, paused_by, reason) VALUES ('default', 0, '', '')"
        )
    assert claim(store, fleet, 5) == []


# ---- declaring and submitting -------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": "fast"}, "'rate_limit' must look like"),
        ({"rate_limit": "0/s"}, "'rate_limit' must allow"),
        ({"global_concurrency": 0}, "'global_concurrency' must be from 1"),
        ({"global_concurrency": True}, "'global_concurrency' must be an int"),
        ({"limit_key": "customer"}, "'limit_key' needs 'global_concurrency' or 'rate_limit'"),
        ({"limit_key": 5, "global_concurrency": 1}, "payload field name or a callable"),
        ({"limit_key": "k", "global_concurrency": 1, "batch": 4}, "cannot be combined"),
    ],
)
def test_bad_fleet_options_fail_at_declaration(options: dict[str, Any], message: str) -> None:
    with pytest.raises(TaskDefinitionError, match=message):
        task("t.bad", **options)(lambda ctx, payload: None)
    assert get_task("t.bad") is None


def test_the_limit_key_is_stored_with_the_task(store: Any) -> None:
    task("t.keyed", global_concurrency=1, limit_key="customer")(lambda ctx, payload: None)
    task("t.called", rate_limit="2/s", limit_key=lambda payload: payload["url"].split("/")[2])(
        lambda ctx, payload: None
    )
    try:
        kept = cairnq.submit("t.keyed", {"customer": 42}, metadata={"mine": 1, "cairnq_django": {"other": 2}})
        assert store.get(kept.id).metadata == {"mine": 1, "cairnq_django": {"other": 2, "limit_key": "42"}}
        called = cairnq.submit("t.called", {"url": "https://example.org/a"})
        assert key_of(store.get(called.id)) == "example.org"
    finally:
        unregister("t.keyed")
        unregister("t.called")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"other": 1}, "has no field 'customer'"),
        ({"customer": None}, "is None"),
        ({"customer": "x" * 2000}, "payload field 'customer' must be at most 1024 bytes"),
    ],
)
def test_a_payload_without_its_key_is_refused_and_nothing_is_written(store: Any, payload: Any, message: str) -> None:
    task("t.keyed", global_concurrency=1, limit_key="customer")(lambda ctx, payload: None)
    try:
        with pytest.raises(ValueError, match=message):
            cairnq.submit("t.keyed", payload)
        with pytest.raises(ValueError, match=message):
            cairnq.submit_many([("t.keyed", {"customer": "ok"}), ("t.keyed", payload)])
        assert store.list() == []
    finally:
        unregister("t.keyed")


def test_a_claim_waits_for_a_concurrent_claim_of_the_same_limit_to_commit(store: Any) -> None:
    """Two workers' claims of one limit at the same moment: the second counts what the first leased.

    The first claim holds its transaction open after leasing; the second must
    wait for it (PostgreSQL: the scope's advisory lock; SQLite: the write
    lock) rather than count without the first one's rows and over-admit.
    """
    fleet = FleetLimits(name="t.race", concurrency=3)
    submit("t.race", 10)
    leased, release = threading.Event(), threading.Event()
    second: list[Any] = []

    def first_worker() -> None:
        try:
            with transaction.atomic():
                assert len(claim(store, fleet, 3, "w1")) == 3
                leased.set()
                release.wait(10)
        finally:
            connections["default"].close()

    def second_worker() -> None:
        try:
            second.extend(claim(store, fleet, 3, "w2"))
        finally:
            connections["default"].close()

    holder = threading.Thread(target=first_worker)
    holder.start()
    assert leased.wait(10)
    racer = threading.Thread(target=second_worker)
    racer.start()
    racer.join(0.5)
    assert racer.is_alive(), "the second claim did not wait for the first one's commit"
    release.set()
    holder.join(10)
    racer.join(10)
    assert second == []


def test_pruning_keeps_what_can_still_count(store: Any) -> None:
    rated = FleetLimits(name="t.pruned", rate=parse_rate("100/h"))
    # A global resource's calls are counted from the start log (concurrency alone is not: see below).
    capped = FleetLimits(name="t.capped", resource="r.capped", resource_capacity=5)
    submit("t.pruned", 2)
    submit("t.capped", 2)
    (done, running) = claim(store, capped, 2)
    claim(store, rated, 2)
    store.complete(done.id, "w1", None)
    keep = {"task:t.pruned": 3_600_000, "resource:r.capped": 0}
    time.sleep(0.01)
    # Only the finished call of the resource scope can no longer count.
    assert store.prune_fleet_starts(keep, 86_400_000) == 1
    assert set(FleetStart.objects.values_list("task_id", flat=True)) >= {running.id}
    assert FleetStart.objects.filter(scope="task:t.pruned").count() == 2
    # With a zero window the rate scope's finished starts go too; running ones stay.
    assert store.prune_fleet_starts({"task:t.pruned": 0, "resource:r.capped": 0}, 0) == 0
    assert FleetStart.objects.count() == 3


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_concurrency_alone_logs_no_start_and_counts_running_leases(store: Any, keyed: bool) -> None:
    fleet = FleetLimits(name="t.leases", concurrency=2, keyed=keyed)
    submit("t.leases", 4)
    first = claim(store, fleet, 4, "w1")
    assert len(first) == 2
    assert FleetStart.objects.count() == 0
    # A task whose lease has run out (its worker died) stops counting; one still leased keeps its slot.
    Task.objects.filter(id=first[0].id).update(lease_until_ms=1)
    assert len(claim(store, fleet, 4, "w2")) == 1
    assert claim(store, fleet, 4, "w2") == []
    # A settled call frees its slot at once.
    store.complete(first[1].id, "w1", None)
    assert len(claim(store, fleet, 4, "w2")) == 1
    assert FleetStart.objects.count() == 0


def test_a_missing_claim_function_reads_as_a_missing_schema(store: Any) -> None:
    # A PostgreSQL database migrated only to 0004 has the tables but not the claim
    # functions; the worker refuses to start on it, and the error reads as what it is.
    if store.dialect != "postgres":
        pytest.skip("the claim functions are PostgreSQL's; SQLite claims with plain statements")
    functions = ("claim_limited", "claim_limited_keyed", "claim_concurrent", "claim_concurrent_keyed")
    connection = connections[store.alias]
    submit("t.unmigrated", 1)
    drop(functions)(None, connection.schema_editor())
    try:
        for fleet, function in [
            (FleetLimits(name="t.unmigrated", concurrency=1), "cairnq_django_claim_concurrent"),
            (FleetLimits(name="t.unmigrated", rate=parse_rate("1/s")), "cairnq_django_claim_limited"),
        ]:
            with pytest.raises(DatabaseError, match=function) as raised:
                claim(store, fleet, 1)
            assert is_missing_table(raised.value)
    finally:
        replace(functions)(None, connection.schema_editor())
    assert len(claim(store, FleetLimits(name="t.unmigrated", concurrency=1), 1)) == 1


def test_the_claim_functions_count_running_tasks_by_plain_index_scans(store: Any) -> None:
    # A settled task leaves a dead entry in cairnq_tasks_lease_idx until vacuum. A bitmap
    # scan visits every such entry on every claim (a limit that never bound halved a
    # PostgreSQL drain); a plain index scan marks them dead once (docs/performance.md).
    if store.dialect != "postgres":
        pytest.skip("the claim functions are PostgreSQL's")
    with connections[store.alias].cursor() as cursor:
        cursor.execute(
            "SELECT proname, proconfig FROM pg_proc WHERE proname LIKE 'cairnq_django_claim_%%' ORDER BY proname"
        )
        settings = dict(cursor.fetchall())
    assert sorted(settings) == [
        "cairnq_django_claim_concurrent",
        "cairnq_django_claim_concurrent_keyed",
        "cairnq_django_claim_limited",
        "cairnq_django_claim_limited_keyed",
    ]
    for name, config in settings.items():
        assert "enable_bitmapscan=off" in config, name
        assert "enable_seqscan=off" in config, name
        assert "plan_cache_mode=force_generic_plan" in config, name


_OTHER_NAME_BACKLOG = """
INSERT INTO cairnq_tasks (id, name, queue, status, payload, attempt, max_attempts, priority,
    run_at_ms, created_at_ms, updated_at_ms)
SELECT 'task_other_' || g, 't.other', 'default', 'queued', '{}'::jsonb, 0, 3, g % 3, g, g, g
FROM generate_series(1, 5000) AS g
"""


@pytest.mark.parametrize(
    "fleet",
    [
        FleetLimits(name="t.alone", concurrency=2),
        FleetLimits(name="t.alone", concurrency=2, keyed=True),
        FleetLimits(name="t.alone", rate=parse_rate("100/s")),
        FleetLimits(name="t.alone", rate=parse_rate("100/s"), keyed=True),
    ],
    ids=["concurrent", "concurrent_keyed", "limited", "limited_keyed"],
)
def test_a_claim_functions_one_plan_reads_its_names_index(store: Any, fleet: FleetLimits) -> None:
    # The functions plan once per session. With the statistics seeing one
    # name (another name's backlog, nothing of this one), a plan made without
    # the name's value would read cairnq_tasks_claim_idx and filter out that
    # whole backlog on every draw. auto_explain shows the plans the function runs.
    if store.dialect != "postgres":
        pytest.skip("the claim functions are PostgreSQL's")
    conn = connections[store.alias]
    conn.close()  # a new session: no plan cached by an earlier test
    with conn.cursor() as cursor:
        cursor.execute(_OTHER_NAME_BACKLOG)
        cursor.execute("ANALYZE cairnq_tasks")
        cursor.execute("LOAD 'auto_explain'")
        for setting in ("log_min_duration = 0", "log_nested_statements = on", "log_level = notice"):
            cursor.execute(f"SET auto_explain.{setting}")
    notices: list[str] = []
    conn.connection.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    try:
        for _ in range(3):  # past a first run, whatever the plan cache does
            # The draw itself: a claim session's probe would find nothing due and not draw.
            assert draw_limited(store, ["default"], "w1", 30_000, fleet, 8) == []
    finally:
        conn.close()
    plans = "\n".join(notice for notice in notices if "p_name" in notice)  # the functions' own statements
    assert "cairnq_tasks_claim_name_idx" in plans, plans
    assert "cairnq_tasks_claim_idx " not in plans, plans
