"""Issue 21's "10 million rows" on PostgreSQL: claim cost, admin pages and retention purge on a big table.

    .venv/bin/python bench/big_table.py all [--quick]      # fill once, then claim, admin, purge
    .venv/bin/python bench/big_table.py claim [--quick]    # one measurement (each fills its own table)
    .venv/bin/python bench/big_table.py admin [--quick]
    .venv/bin/python bench/big_table.py purge [--quick]

Issue 21 asks, with 10,000,000 terminal rows and 100,000 due: one claim
costs at most 1.5x the same claim on an empty table; the admin list and
dashboard answer under 300 ms; retention purges the 10 million in batches
while a drain runs, no batch holding its locks over 100 ms, the drain
keeping at least 0.8x its rate. Default sizes are the issue's; ``--rows``,
``--due``, ``--drain`` shrink them, ``--quick`` is 300,000 rows, 10,000 due
and 5,000-task drains.

The table. Database ``bench_big`` (``--db``) is dropped, recreated and
migrated with the bench project (``bench/ours_project``). ``--due`` queued
tasks, all due, go to queue ``due``; then ``--rows`` finished tasks (95 %
succeeded, 4 % failed, 1 % canceled over queues bench, due, q2-q7 and 42
names, completed over the 30 days before an hour ago) are generated inside
the database, ``--chunk`` rows a statement, with the product's indexes in
place; then ``VACUUM (ANALYZE)`` and a checkpoint. No finished task has a
business key unless ``--key-every N`` gives every N-th one a key: purging a
task then also deletes its key by the key table's ``ON DELETE CASCADE``.

claim: the empty table is a second database, ``bench_big_empty``, built the
same way without the finished rows. ``--rounds`` rounds alternate between
the two (empty first in even rounds, big first in odd ones), so load from
the rest of the machine falls on both alike. A round is one process of the
bench project (``_big_client.py claim``) making ``--warmup`` untimed and
``--claims`` timed claims through ``get_store().claim`` (one row, queue
``due``, name ``bench.noop``: a worker's probe and draw), each completed at
once, untimed. Reported: p50, p95 and mean of every timed claim, big / empty.

admin: ``_big_client.py admin`` (the test project, as ``admin_scale.py``)
migrates the test project's own tables, loads ``admin_scale.load_fleet``'s
100 workers and hour of history, and times the task list (unfiltered,
status failed, queue q5, name bench.job7), the dashboard and its live
fragment with ``admin_scale.timed``: one warm-up, then ``--repeat`` fetches.

purge: one ``manage.py cairnq_worker --concurrency 16`` process (``--workers``,
``--concurrency``) serves queue ``bench``. A drain inserts ``--drain`` no-op
tasks in one transaction and lasts from that commit until none is queued or
running; rate = tasks / that time, and every task is checked succeeded.
First ``--drains`` drains alone; then ``_big_client.py purge`` runs the
retention sweep a worker's housekeeping runs (``retention.sweep`` with
``RETENTION`` one hour, so every filled row and none of the run's own tasks,
in its default batches), timing each batch's statement, which is its
transaction and holds that batch's row locks until it commits; meanwhile the
harness runs drains back to back, at most ``--drains`` of them, while the
purge lasts; then ``--drains`` drains alone again. The rate during the purge
is the median of the drains that ran entirely inside it (if the purge ended
before one drain did, the one it overlapped is reported with its overlap,
and the ratio is marked partial); the ratio is against the drains alone
before it, and the drains after it show whether the machine's load moved
meanwhile.
A purge that outlasts the drains goes on alone to the end: its total time,
all its batches, and separately the batches that overlapped a drain, are
reported. This server runs with autovacuum off (recorded with the figures):
nothing vacuums the purged rows while the purge runs.

Prints the figures and the issue's targets, and writes them to
``bench/results/big_table-<command>-<UTC timestamp>.json`` (logs under
``bench/results/logs/``). Method: ``docs/performance.md``, "Scale-out
(issue 21)".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _fleet
import _tables
import _wire  # bench/peers, put on the path by _tables
from _harness import BENCH, REPO, peer_env, tail

FULL = {"rows": 10_000_000, "due": 100_000, "drain": 20_000, "claims": 2_000}
QUICK = {"rows": 300_000, "due": 10_000, "drain": 5_000, "claims": 1_000}
# The fill's newest completion is an hour old (big_fill_terminal.sql): a
# one-hour retention purges every filled row and none of the run's own tasks.
RETENTION_MS = 3_600_000
DRAIN_QUEUE = "bench"
TERMINAL = ("succeeded", "failed", "canceled")


def pct(values: list[float], q: int) -> float:
    """The q-th percentile (inclusive method), or the one value there is."""
    if len(values) > 1:
        return statistics.quantiles(values, n=100, method="inclusive")[q - 1]
    return values[0] if values else 0.0


def spread(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": pct(values, 50),
        "p95": pct(values, 95),
        "mean": statistics.fmean(values) if values else 0.0,
        "max": max(values, default=0.0),
    }


def run_child(role: str, argv: list[str], env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``_big_client.py role`` to the end and return its JSON answer (stderr to ``log``)."""
    with open(log, "ab") as err:
        done = subprocess.run(
            [_fleet.PYTHON, str(BENCH / "_big_client.py"), role, *argv],
            stdout=subprocess.PIPE,
            stderr=err,
            env=peer_env(env),
            cwd=str(BENCH),
            text=True,
            check=False,
        )
    return _answer(done.stdout, done.returncode, log)


def _answer(stdout: str, code: int | None, log: Path) -> dict[str, Any]:
    lines = stdout.strip().splitlines()
    answer = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
    if answer is None or "fatal" in answer:
        detail = answer["fatal"] if answer else f"no answer (exit {code}): {tail(log)}"
        raise RuntimeError(f"{log.name}: {detail}")
    return answer


class PurgeProcess:
    """``_big_client.py purge``: started, waited for until Django is up, then released by one line."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        self._err = open(log, "ab")  # noqa: SIM115 - closed in result()
        self.proc = subprocess.Popen(
            [_fleet.PYTHON, str(BENCH / "_big_client.py"), "purge", "--older-than-ms", str(RETENTION_MS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            env=peer_env(env),
            cwd=str(BENCH),
            text=True,
        )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        first = self.proc.stdout.readline()
        if first.strip() != "ready":
            _answer(first + self.proc.stdout.read(), self.proc.wait(), log)  # raises with the child's error
            raise RuntimeError(f"purge process said {first!r}")
        self._out = ""
        self._reader = threading.Thread(target=self._read, daemon=True)

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        # Its answer (every batch's timing) can outgrow the pipe's buffer: read
        # it as it comes, or the child blocks on its last write and never ends.
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self._out = self.proc.stdout.read()

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """End a purge still running (the harness failed before it finished); nothing once it has."""
        if self.running():
            self.proc.terminate()
            self.proc.wait()
            self._err.close()

    def result(self) -> dict[str, Any]:
        """Wait for the purge to end (however long it takes) and return its answer."""
        self._reader.join()
        code = self.proc.wait()
        self._err.close()
        return _answer(self._out, code, self.log)


class BigTable:
    """One command's run: its databases, its logs, its figures."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        sizes = QUICK if args.quick else FULL
        self.rows = args.rows if args.rows is not None else sizes["rows"]
        self.due = args.due if args.due is not None else sizes["due"]
        self.drain_n = args.drain if args.drain is not None else sizes["drain"]
        self.claims = args.claims if args.claims is not None else sizes["claims"]
        custom = any(v is not None for v in (args.rows, args.due, args.drain, args.claims))
        self.mode = "custom" if custom else "quick" if args.quick else "full"
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.logs = BENCH / "results" / "logs" / f"big_table-{args.command}-{self.stamp}"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.db = args.db
        self.empty_db = f"{args.db}_empty"
        self.result: dict[str, Any] = {
            "command": args.command,
            "quick": args.quick,
            "sizes_mode": self.mode,
            "started": self.stamp,
            "sizes": {
                "terminal_rows": self.rows,
                "due": self.due,
                "drain_tasks": self.drain_n,
                "claims_per_round": self.claims,
                "claim_rounds": args.rounds,
                "claim_warmup": args.warmup,
                "admin_repeat": args.repeat,
                "drains": args.drains,
                "workers": args.workers,
                "concurrency": args.concurrency,
                "retention_ms": RETENTION_MS,
                "key_every": args.key_every,
            },
            "load_before": _fleet.load(),
            **_git_state(),
        }

    def say(self, msg: str) -> None:
        print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {msg}", flush=True)

    def dsn(self, db: str) -> str:
        return _tables.pg_dsn(self.args.pg, db)

    def url(self, db: str) -> str:
        return _tables.pg_url(self.args.pg, db)

    # ------------------------------------------------------------ the table
    def build(self, with_empty: bool) -> None:
        """Create and fill the big table (and, for ``claim``, its empty twin)."""
        needed = self.args.rounds * (self.args.warmup + self.claims)
        if with_empty and needed > self.due:
            raise SystemExit(f"--due {self.due:,} is too few for {needed:,} claims per database")
        self.result["server"] = self.server_settings()
        built: dict[str, Any] = {}
        if with_empty:
            built["empty"] = self.create(self.empty_db)
        built["big"] = self.create(self.db)
        with _fleet.connect(self.dsn(self.db)) as conn:
            started = time.monotonic()
            self.fill_terminal(conn)
            if self.args.key_every:
                conn.execute(_wire.sql("postgres", "big_fill_keys"), {"every": self.args.key_every})
                conn.execute("VACUUM (ANALYZE) cairnq_task_keys")
            built["fill_s"] = time.monotonic() - started
            built["settle_s"] = self.settle(conn)
            built["table"] = _fleet.table_stats(conn, "cairnq_tasks")
        self.result["build"] = built
        keys = f" ({self.rows // self.args.key_every:,} with keys)" if self.args.key_every else ""
        self.say(
            f"big table: {self.rows:,} finished{keys} + {self.due:,} due rows, "
            f"{built['table']['total_bytes'] / 1e9:.2f} GB with indexes; fill {built['fill_s']:.0f} s, "
            f"vacuum {built['settle_s']:.0f} s"
        )

    def create(self, db: str) -> dict[str, float]:
        """Drop, recreate and migrate ``db``, then add the due tasks."""
        started = time.monotonic()
        _tables.fresh_pg(self.args.pg, db)
        _fleet.migrate(_fleet.project_env(self.url(db)), self.logs / f"migrate-{db}.log")
        with _fleet.connect(self.dsn(db)) as conn:
            conn.execute(_wire.sql("postgres", "big_fill_due"), {"n": self.due, "now": self.now_ms(conn)})
            self.settle(conn)
        self.say(f"{db}: migrated, {self.due:,} due tasks in queue due")
        return {"create_s": time.monotonic() - started}

    def fill_terminal(self, conn: Any) -> None:
        """Insert the finished rows, ``--chunk`` a statement (each its own transaction), printing progress."""
        now = self.now_ms(conn)
        started = time.monotonic()
        for lo in range(1, self.rows + 1, self.args.chunk):
            hi = min(self.rows, lo + self.args.chunk - 1)
            conn.execute(_wire.sql("postgres", "big_fill_terminal"), {"lo": lo, "hi": hi, "n": self.rows, "now": now})
            elapsed = time.monotonic() - started
            self.say(f"  filled {hi:,} / {self.rows:,} finished rows ({elapsed:.0f} s)")

    def settle(self, conn: Any) -> float:
        """VACUUM (ANALYZE) and CHECKPOINT, as a server would have settled a table this old; return seconds.

        Without it the first readers set every row's hint bits and the
        planner guesses from an empty table's statistics.
        """
        started = time.monotonic()
        conn.execute("VACUUM (ANALYZE) cairnq_tasks")
        try:
            conn.execute(_wire.sql("postgres", "checkpoint"))
        except Exception:  # noqa: BLE001 - a role without the right only loses the settling
            pass
        return time.monotonic() - started

    def now_ms(self, conn: Any) -> int:
        return int(conn.execute(_wire.sql("postgres", "raw_now_ms")).fetchone()[0])

    def server_settings(self) -> dict[str, str]:
        with _fleet.connect(self.dsn("postgres")) as conn:
            rows = conn.execute(_wire.sql("postgres", "big_server_settings")).fetchall()
        return {name: f"{setting}{' ' + unit if unit else ''}" for name, setting, unit in rows}

    # ------------------------------------------------------------ claim
    def claim(self) -> None:
        """Single-row claims on the empty and the big table, in alternating rounds."""
        times: dict[str, list[float]] = {"empty": [], "big": []}
        rounds = []
        for r in range(self.args.rounds):
            order = ("empty", "big") if r % 2 == 0 else ("big", "empty")
            medians = {}
            for which in order:
                db = self.empty_db if which == "empty" else self.db
                answer = run_child(
                    "claim",
                    ["--k", str(self.claims), "--warmup", str(self.args.warmup)],
                    _fleet.project_env(self.url(db)),
                    self.logs / f"claim-{which}-{r}.log",
                )
                times[which] += answer["times_ms"]
                medians[which] = statistics.median(answer["times_ms"])
            rounds.append({**medians, "load": _fleet.load()})
            self.say(f"  claim round {r + 1}: p50 empty {medians['empty']:.2f} ms, big {medians['big']:.2f} ms")
        empty, big = spread(times["empty"]), spread(times["big"])
        self.result["claim"] = {
            "empty": empty,
            "big": big,
            "rounds": rounds,
            "ratio_p50": big["p50"] / empty["p50"],
            "ratio_mean": big["mean"] / empty["mean"],
            "ratio_p95": big["p95"] / empty["p95"],
            "times_ms": times,
        }

    # ------------------------------------------------------------ admin
    def admin(self) -> None:
        """The task list and the dashboard, timed by admin_scale.py's code in a test-project process."""
        env = {"DATABASE_URL": self.url(self.db).replace("postgresql://", "postgres://", 1)}
        answer = run_child("admin", ["--repeat", str(self.args.repeat)], env, self.logs / "admin.log")
        self.result["admin"] = answer
        for page in answer["pages"]:
            self.say(f"  {page['page']}: p50 {page['median_ms']:.0f} ms, p95 {page['p95_ms']:.0f} ms")

    # ------------------------------------------------------------ purge
    def purge(self) -> None:
        """Drains alone, then drains while the retention purge deletes the finished rows."""
        env = _fleet.project_env(self.url(self.db))
        purger: PurgeProcess | None = None
        with _fleet.connect(self.dsn(self.db)) as conn:
            fleet = _fleet.Fleet(self.args.workers, self.args.concurrency, env, self.logs, "drain", [])
            try:
                fleet.wait_ready()
                time.sleep(1.0)
                alone = [self.drain(conn, fleet, f"alone {i + 1}") for i in range(self.args.drains)]
                before = _fleet.table_stats(conn, "cairnq_tasks")
                purger = PurgeProcess(env, self.logs / "purge.log")
                purger.go()
                during = []
                while purger.running() and len(during) < self.args.drains:
                    during.append(self.drain(conn, fleet, f"during purge {len(during) + 1}"))
                self.wait_purge(conn, purger)
                purged = purger.result()
                after = _fleet.table_stats(conn, "cairnq_tasks")
                # The same drains alone again: if the machine's load moved while the
                # purge ran, before and after disagree (the table is not the same
                # either: the purged rows are dead, not yet vacuumed).
                alone_after = [self.drain(conn, fleet, f"alone after {i + 1}") for i in range(self.args.drains)]
            finally:
                if purger is not None:
                    purger.stop()
                codes = fleet.stop()
        self.result["purge"] = self.purge_figures(alone, during, purged, before, after, codes)
        self.result["purge"]["drains_alone_after"] = alone_after
        self.result["purge"]["alone_after_tasks_per_s"] = statistics.median(d["tasks_per_s"] for d in alone_after)

    def drain(self, conn: Any, fleet: _fleet.Fleet, label: str) -> dict[str, Any]:
        """Insert ``--drain`` no-op tasks in one transaction; time until none is live; check all succeeded."""
        n = self.drain_n
        ids = [_wire.task_id() for _ in range(n)]
        with conn.transaction():
            for lo in range(0, n, 1000):
                chunk = ids[lo : lo + 1000]
                params = {"ids": chunk, "payloads": ["{}"] * len(chunk), "name": "bench.noop", "queue": DRAIN_QUEUE}
                conn.execute(_wire.sql("postgres", "raw_insert_many"), params)
        start = _wire.now()
        deadline = start + max(120.0, n / 20)
        while conn.execute(_wire.sql("postgres", "live_exists"), {"queue": DRAIN_QUEUE}).fetchone()[0]:
            if _wire.now() > deadline:
                raise TimeoutError(f"drain {label}: not drained within {deadline - start:.0f} s")
            fleet.check_alive()
            time.sleep(0.01)
        end = _wire.now()
        done = int(conn.execute(_wire.sql("postgres", "big_succeeded_of"), {"ids": ids}).fetchone()[0])
        if done != n:
            raise RuntimeError(f"drain {label}: {done:,} of {n:,} tasks succeeded")
        rate = n / (end - start)
        self.say(f"  drain {label}: {rate:,.0f} tasks/s ({end - start:.2f} s)")
        return {"start": start, "end": end, "seconds": end - start, "tasks_per_s": rate, "load": _fleet.load()}

    def wait_purge(self, conn: Any, purger: PurgeProcess) -> None:
        """Wait out a purge that outlasted the drains, printing its progress (the server's delete counter)."""
        base = _fleet.db_counters(conn, self.db)["tup_deleted"]
        last = time.monotonic()
        while purger.running():
            time.sleep(0.5)
            if time.monotonic() - last >= 30:
                last = time.monotonic()
                gone = _fleet.db_counters(conn, self.db)["tup_deleted"] - base
                self.say(f"  purge going on after the drains: about {gone:,} more rows deleted")

    def purge_figures(
        self,
        alone: list[dict[str, Any]],
        during: list[dict[str, Any]],
        purged: dict[str, Any],
        before: dict[str, int],
        after: dict[str, int],
        codes: list[int],
    ) -> dict[str, Any]:
        """Rates alone and inside the purge, and the batches' durations (all, and those beside a drain)."""
        p0, p1 = purged["started"], purged["ended"]
        for d in during:
            inside = max(0.0, min(d["end"], p1) - max(d["start"], p0))
            d["overlap"] = inside / d["seconds"]
        full = [d for d in during if d["overlap"] >= 0.999]
        partial = not full
        counted = full or [d for d in during if d["overlap"] > 0]
        batches = purged["batches"]  # [start, ms, rows]
        beside = [ms for start, ms, _ in batches if any(d["start"] <= start <= d["end"] for d in during)]
        every = [ms for _, ms, _ in batches]
        tenth = max(1, len(every) // 10)
        alone_rate = statistics.median(d["tasks_per_s"] for d in alone)
        during_rate = statistics.median(d["tasks_per_s"] for d in counted) if counted else 0.0
        figures = {
            "drains_alone": alone,
            "drains_during": during,
            "alone_tasks_per_s": alone_rate,
            "during_tasks_per_s": during_rate,
            "ratio": during_rate / alone_rate if alone_rate else 0.0,
            "ratio_partial": partial,
            "drains_inside_purge": len(full),
            "rows_purged": purged["purged"],
            "rows_expected": self.rows,
            "batch_limit": purged["batch_limit"],
            "batches": len(batches),
            "purge_seconds": p1 - p0,
            "purge_rows_per_s": purged["purged"] / (p1 - p0) if p1 > p0 else 0.0,
            "finished_during_drains": bool(during) and p1 <= during[-1]["end"],
            "batch_ms": spread(every),
            "batch_ms_beside_drains": spread(beside),
            "batches_over_100ms": sum(1 for ms in every if ms > 100),
            # Does a batch cost more as the purge goes on (dead index entries ahead of it)?
            "batch_ms_p50_first_tenth": statistics.median(every[:tenth]) if every else 0.0,
            "batch_ms_p50_last_tenth": statistics.median(every[-tenth:]) if every else 0.0,
            "batch_log": batches,
            "table_before": before,
            "table_after": after,
            "worker_exit_codes": codes,
        }
        self.say(
            f"  purge: {purged['purged']:,} rows in {len(batches):,} batches over {p1 - p0:.1f} s; "
            f"batch p50 {figures['batch_ms']['p50']:.1f} ms, p95 {figures['batch_ms']['p95']:.1f} ms, "
            f"max {figures['batch_ms']['max']:.1f} ms"
        )
        if purged["purged"] != self.rows:
            self.say(f"  WARNING: purged {purged['purged']:,} rows, the fill made {self.rows:,}")
        return figures

    # ------------------------------------------------------------ output
    def report(self) -> None:
        """Print each figure beside issue 21's target."""
        r = self.result
        size = f"{self.rows:,} finished rows, {self.due:,} due"
        lines = [("measurement", "figure", "target", "met")]
        if "claim" in r:
            c = r["claim"]
            for stat in ("p50", "mean", "p95"):
                lines.append(
                    (
                        f"claim {stat}: big / empty",
                        f"{c['big'][stat]:.2f} / {c['empty'][stat]:.2f} ms = {c[f'ratio_{stat}']:.2f}x",
                        "<= 1.5x" if stat == "p50" else "",
                        _met(c[f"ratio_{stat}"] <= 1.5) if stat == "p50" else "",
                    )
                )
        if "admin" in r:
            for page in r["admin"]["pages"]:
                lines.append(
                    (
                        f"admin {page['page']} (p50 / p95)",
                        f"{page['median_ms']:.0f} / {page['p95_ms']:.0f} ms",
                        "p95 < 300 ms",
                        _met(page["p95_ms"] < 300 and page["http"] == 200),
                    )
                )
        if "purge" in r:
            p = r["purge"]
            b = p["batch_ms"]
            lines += [
                (
                    "purge batch (p50 / p95 / max)",
                    f"{b['p50']:.1f} / {b['p95']:.1f} / {b['max']:.1f} ms",
                    "max <= 100 ms",
                    _met(b["max"] <= 100),
                ),
                (
                    "  beside a drain (p50 / p95 / max)",
                    f"{p['batch_ms_beside_drains']['p50']:.1f} / {p['batch_ms_beside_drains']['p95']:.1f}"
                    f" / {p['batch_ms_beside_drains']['max']:.1f} ms",
                    "",
                    "",
                ),
                (
                    "  batch p50, first / last tenth",
                    f"{p['batch_ms_p50_first_tenth']:.1f} / {p['batch_ms_p50_last_tenth']:.1f} ms",
                    "",
                    "",
                ),
                (
                    "drain during purge / alone",
                    f"{p['during_tasks_per_s']:,.0f} / {p['alone_tasks_per_s']:,.0f} tasks/s = {p['ratio']:.2f}x"
                    + (" (partial overlap)" if p["ratio_partial"] else ""),
                    ">= 0.8x",
                    _met(p["ratio"] >= 0.8),
                ),
                (
                    "  drain alone after the purge",
                    f"{p['alone_after_tasks_per_s']:,.0f} tasks/s (against {p['alone_tasks_per_s']:,.0f} before)",
                    "",
                    "",
                ),
                (
                    "purge",
                    f"{p['rows_purged']:,} rows, {p['batches']:,} batches of at most {p['batch_limit']:,}, "
                    f"{p['purge_seconds']:.1f} s ({p['purge_rows_per_s']:,.0f} rows/s)",
                    "",
                    "",
                ),
                (
                    "  finished during the drains",
                    f"{'yes' if p['finished_during_drains'] else 'no'} "
                    f"({p['drains_inside_purge']} of {len(p['drains_during'])} drains wholly inside it)",
                    "",
                    "",
                ),
            ]
        widths = [max(len(row[i]) for row in lines) for i in range(4)]
        print(f"\nbig_table {self.args.command}: {size} ({self.mode} sizes)")
        for i, row in enumerate(lines):
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
            if i == 0:
                print("  ".join("-" * w for w in widths))

    def write(self) -> Path:
        self.result["load_after"] = _fleet.load()
        out = BENCH / "results" / f"big_table-{self.args.command}-{self.stamp}.json"
        out.write_text(json.dumps(self.result, indent=2))
        self.say(f"wrote {out}")
        return out


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def _git_state() -> dict[str, Any]:
    """The commit measured, and whether the product code had uncommitted changes (they are what ran)."""

    def git(*argv: str) -> str:
        try:
            return subprocess.check_output(["git", *argv], cwd=REPO, text=True, stderr=subprocess.DEVNULL).strip()
        except Exception:  # noqa: BLE001 - recorded as unknown
            return ""

    changed = git("status", "--porcelain", "--", "cairnq_django")
    return {"commit": git("rev-parse", "--short", "HEAD"), "product_uncommitted": changed.splitlines()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["claim", "admin", "purge", "all"])
    parser.add_argument("--quick", action="store_true", help="300,000 rows, 10,000 due, 5,000-task drains")
    parser.add_argument("--rows", type=int, help="finished rows (10,000,000)")
    parser.add_argument("--due", type=int, help="due tasks (100,000)")
    parser.add_argument("--drain", type=int, help="tasks per drain (20,000)")
    parser.add_argument("--claims", type=int, help="timed claims per round and table (2,000; quick 1,000)")
    parser.add_argument("--rounds", type=int, default=3, help="claim rounds, alternating empty and big")
    parser.add_argument("--warmup", type=int, default=20, help="untimed claims before each round's")
    parser.add_argument("--repeat", type=int, default=20, help="fetches of each admin page after one warm-up")
    parser.add_argument("--drains", type=int, default=3, help="drains alone, and at most as many during the purge")
    parser.add_argument("--workers", type=int, default=1, help="worker processes of the drain")
    parser.add_argument("--concurrency", type=int, default=16, help="each drain worker's --concurrency")
    parser.add_argument("--chunk", type=int, default=1_000_000, help="finished rows per fill statement")
    parser.add_argument(
        "--key-every", type=int, default=0, help="give every N-th finished task a business key (default: none)"
    )
    parser.add_argument(
        "--pg", default="postgresql://root@127.0.0.1:5432/postgres", help="DSN of any database on the server"
    )
    parser.add_argument("--db", default="bench_big", help="database to drop and recreate (must start with bench_)")
    args = parser.parse_args()
    bench = BigTable(args)
    steps = ["claim", "admin", "purge"] if args.command == "all" else [args.command]
    bench.say(
        f"big_table {args.command} ({bench.mode} sizes): {bench.rows:,} finished rows, "
        f"{bench.due:,} due; load {bench.result['load_before']}"
    )
    bench.build(with_empty="claim" in steps)
    for step in steps:  # the purge last: it deletes the rows the others measure
        bench.say(f"{step}:")
        getattr(bench, step)()
    bench.report()
    bench.write()


if __name__ == "__main__":
    main()
