"""Scale-out on PostgreSQL (issue 21), measured with real worker and client processes.

    .venv/bin/python bench/fleet_scale.py processes [--quick] [--claim-ahead N|auto]  # drain rate at 1-16 worker processes; heartbeats
    .venv/bin/python bench/fleet_scale.py pooler [--quick]      # K workers + M clients through PgBouncer
    .venv/bin/python bench/fleet_scale.py xmin [--quick] [--flow-s S]  # a held REPEATABLE READ snapshot while tasks flow

Each command drops and recreates its own database (``bench_scale`` unless
``--db``), runs ``manage.py cairnq_worker`` of the bench project
(``bench/ours_project``, handlers in ``scale_tasks.py``) as separate
processes, compares runs taken in the same session, prints the figures and
writes them to ``bench/results/fleet_scale-<command>-<UTC timestamp>.json``
(logs under ``bench/results/logs/``). ``pooler`` needs PgBouncer on
``--pooler`` (``scripts/ensure-pgbouncer``). Method and latest figures:
``docs/performance.md``, "Scale-out (issue 21)".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cpu
import _fleet
import _tables
import _wire  # bench/peers, put on the path by _tables
from _harness import BENCH

QUEUE = "bench"


def runs_cpu(cpu: list[dict[str, float]], role: str) -> float:
    return statistics.median(each[role] for each in cpu)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[94] if len(values) > 1 else (values or [0.0])[0]


class Bench:
    """One command's run: its database, its logs, its result file."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.logs = BENCH / "results" / "logs" / f"fleet_scale-{args.command}-{self.stamp}"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.db_url = _tables.pg_url(args.pg, args.db)
        self.dsn = _tables.pg_dsn(args.pg, args.db)
        self.polls = 0
        self.result: dict[str, Any] = {
            "command": args.command,
            "quick": args.quick,
            "started": self.stamp,
            "load_before": _fleet.load(),
            "commit": _git_commit(),
        }

    def say(self, msg: str) -> None:
        print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {msg}", flush=True)

    def prepare(self) -> None:
        _tables.fresh_pg(self.args.pg, self.args.db)
        _fleet.migrate(_fleet.project_env(self.db_url), self.logs / "migrate.log")
        with _fleet.connect(self.dsn) as conn:
            conn.execute(_wire.sql("postgres", "scale_runs_create"))
            if self.args.statements:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def reset(self, conn: Any) -> None:
        """Empty the queue and the run log and vacuum, so every run starts from the same table."""
        conn.execute("DELETE FROM cairnq_tasks WHERE queue = %s", [QUEUE])
        conn.execute(_wire.sql("postgres", "scale_runs_empty"))
        conn.execute("VACUUM (ANALYZE) cairnq_tasks")
        try:
            conn.execute("CHECKPOINT")
        except Exception:  # noqa: BLE001 - a role without the right only loses the settling
            pass

    def preload(
        self, conn: Any, n: int, name: str, payload: dict[str, Any] | None = None, one_txn: bool = True
    ) -> None:
        """Insert ``n`` due tasks in chunks of 1,000 (in one transaction unless ``one_txn`` is false)."""
        body = json.dumps(payload) if payload is not None else None

        def chunks() -> None:
            for lo in range(0, n, 1000):
                size = min(n, lo + 1000) - lo
                payloads = [body or json.dumps({"i": i}) for i in range(lo, lo + size)]
                ids = [_wire.task_id() for _ in payloads]
                params = {"ids": ids, "payloads": payloads, "name": name, "queue": QUEUE}
                conn.execute(_wire.sql("postgres", "raw_insert_many"), params)

        if one_txn:
            with conn.transaction():
                chunks()
        else:
            chunks()

    def live(self, conn: Any) -> bool:
        self.polls += 1  # each poll is a commit on the database: cost figures subtract them
        return bool(conn.execute(_wire.sql("postgres", "live_exists"), {"queue": QUEUE}).fetchone()[0])

    def counts(self, conn: Any) -> dict[str, int]:
        rows = conn.execute(_wire.sql("postgres", "count_by_status"), {"queue": QUEUE}).fetchall()
        return {status: int(n) for status, n in rows}

    def wait_drained(
        self, conn: Any, fleet: _fleet.Fleet, timeout: float, clients: _fleet.Clients | _Feeding | None = None
    ) -> float:
        deadline = time.monotonic() + timeout
        # The clients first: while they still submit, the queue cannot be
        # drained, and under a held snapshot each read of the queue walks
        # every task claimed since (one every 10 ms took a third of a core).
        while (clients is not None and not clients.done()) or self.live(conn):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not drained within {timeout:.0f}s: {self.counts(conn)}")
            fleet.check_alive()
            time.sleep(0.01)
        return time.monotonic()

    def write(self) -> Path:
        self.result["load_after"] = _fleet.load()
        out = BENCH / "results" / f"fleet_scale-{self.args.command}-{self.stamp}.json"
        out.write_text(json.dumps(self.result, indent=2))
        self.say(f"wrote {out}")
        return out

    # ------------------------------------------------------------ processes
    def processes(self) -> None:
        """Drain rate at 1, 2, 4, 8, 16 worker processes sharing one total concurrency; heartbeat cost."""
        quick = self.args.quick
        n = self.args.n or (2_000 if quick else 20_000)
        rounds = self.args.rounds or (1 if quick else 3)
        total = self.args.total_concurrency
        window = 5.0 if quick else 20.0
        counts = [p for p in self.args.processes if p <= total]
        ahead = self.args.claim_ahead
        self.result.update(
            n=n, rounds=rounds, total_concurrency=total, claim_ahead=ahead, lease_ms=self.args.lease_ms, window_s=window
        )
        flags = ["--lease-ms", str(self.args.lease_ms), "--claim-ahead", ahead]
        drains: dict[int, list[dict[str, Any]]] = {procs: [] for procs in counts}
        starts: dict[int, list[float]] = {procs: [] for procs in counts}
        codes: dict[int, list[int]] = {procs: [] for procs in counts}
        beats: dict[int, dict[str, float]] = {}
        # In rounds, each running every fleet size once with a fleet of its
        # own: a drift of the machine (load a previous command left, a
        # checkpoint) then reaches every size alike instead of the first.
        for round_no in range(rounds):
            for procs in counts:
                conc = total // procs
                env = _fleet.project_env(self.db_url)
                fleet = _fleet.Fleet(procs, conc, env, self.logs, f"r{round_no}-p{procs}", flags)
                try:
                    starts[procs].append(fleet.wait_ready())
                    time.sleep(1.0)
                    drain = self.drain_once(fleet, procs, n)
                    # The heartbeat window fills every slot with a sleeping task; a
                    # worker claiming a fixed number ahead would lease several of them
                    # to one slot ("auto" never claims a long name ahead).
                    if round_no == 0 and ahead in ("auto", "0"):
                        beats[procs] = self.heartbeat_window(fleet, procs, conc, window)
                finally:
                    codes[procs] += fleet.stop()
                drains[procs].append(drain)
                self.say(
                    f"  round {round_no + 1}, {procs:2d} x c{conc:<2d}: {drain['rate']:,.0f} tasks/s"
                    f" (autovacuums of the table that ended in it: {drain['autovacuums']})"
                )
        runs = {
            procs: self.summarise(total // procs, drains[procs], starts[procs], codes[procs], beats.get(procs, {}))
            for procs in counts
        }
        for procs, run in runs.items():
            beat = beats.get(procs)
            self.say(
                f"  {procs:2d} x c{run['concurrency_each']:<2d}: {run['median']:,.0f} tasks/s "
                f"({', '.join(f'{r:,.0f}' for r in run['rates'])}; autovacuums {run['autovacuum_runs']}); "
                f"{run['commits_per_task']:.2f} commits/task; "
                f"{run['wal_bytes_per_task']:,.0f} WAL bytes/task; CPU/task: workers "
                f"{run['cpu_us_per_task']['worker']:,.0f} us, server {run['cpu_us_per_task']['server']:,.0f} us"
                + (
                    f"; idle {beat['idle_commits_per_s_per_worker']:.2f} commits/s/worker, "
                    f"holding leases {beat['holding_commits_per_s_per_worker']:.2f} commits/s/worker, "
                    f"{beat['rows_updated_per_commit_holding']:.1f} rows updated/commit"
                    if beat
                    else ""
                )
            )
        best = max(r["median"] for r in runs.values())
        at16 = max((r["median"] for p, r in runs.items() if p >= 16), default=0.0)
        self.result["runs"] = {str(p): r for p, r in runs.items()}
        self.result["best"] = best
        self.result["best_at_16_or_more"] = at16
        self.result["ratio_16_to_best"] = at16 / best if best else 0.0
        self.say(f"best {best:,.0f}/s; best at >= 16 processes {at16:,.0f}/s = {at16 / best:.2f}x (target >= 0.8x)")
        self.write()

    def drain_once(self, fleet: _fleet.Fleet, procs: int, n: int) -> dict[str, Any]:
        """Insert ``n`` no-op tasks into an emptied, vacuumed table and time the fleet draining them."""
        # An autovacuum that fell inside one drain and not the next spread one
        # fleet size's drains by up to 2.8x: each drain starts vacuumed, and
        # the autovacuums that still end inside it are counted.
        with _fleet.connect(self.dsn) as conn:
            self.reset(conn)
            table_before = _fleet.table_stats(conn, "cairnq_tasks")
        before = self.counters()
        self.polls = 0
        # A connection of its own, closed after the drain: a backend
        # publishes its counters at exit, so its polls can be subtracted.
        with _fleet.connect(self.dsn) as conn:
            lsn_before = _fleet.wal_lsn(conn)
            self.preload(conn, n, "bench.noop")
            t0 = time.monotonic()
            cpu_before = _cpu.snapshot(self.args.db)
            t1 = self.wait_drained(conn, fleet, timeout=max(120.0, n / 20))
            used = _cpu.seconds_by_role(cpu_before, _cpu.snapshot(self.args.db))
            wal = _fleet.wal_bytes_since(conn, lsn_before) / n
            got = self.counts(conn)
        if got.get("succeeded", 0) != n:
            raise RuntimeError(f"{procs} processes: expected {n} succeeded, found {got}")
        # An idle backend may hold its counters back for up to 10 s
        # (PostgreSQL 15's idle stats interval): wait that out.
        time.sleep(11.0)
        after = self.counters()
        with _fleet.connect(self.dsn) as conn:
            table_after = _fleet.table_stats(conn, "cairnq_tasks")
        return {
            "rate": n / (t1 - t0),
            # Less the harness's own: the first counter read, the preload, the polls, the count.
            "commits_per_task": (after["xact_commit"] - before["xact_commit"] - self.polls - 3) / n,
            "wal_bytes_per_task": wal,
            "cpu_us_per_task": {role: seconds * 1e6 / n for role, seconds in used.items()},
            "autovacuums": table_after["autovacuum_count"] - table_before["autovacuum_count"],
        }

    def summarise(
        self, conc: int, drains: list[dict[str, Any]], starts: list[float], codes: list[int], beat: dict[str, float]
    ) -> dict[str, Any]:
        """One fleet size's figures over its rounds: medians, and the WAL of its leanest drain."""
        rates = [d["rate"] for d in drains]
        return {
            "concurrency_each": conc,
            "startup_s": starts,
            "rates": rates,
            "median": statistics.median(rates),
            "commits_per_task": statistics.median(d["commits_per_task"] for d in drains),
            # CPU per task over the drain: the worker processes, and the server
            # backends of this database (the harness's poll included).
            "cpu_us_per_task": {
                role: runs_cpu([d["cpu_us_per_task"] for d in drains], role) for role in ("worker", "server")
            },
            # The whole server's WAL over insert + drain: other databases' writes count too.
            "wal_bytes_per_task": min(d["wal_bytes_per_task"] for d in drains),
            # Autovacuums of cairnq_tasks that ended during each drain (or the 11 s after it).
            "autovacuum_runs": [d["autovacuums"] for d in drains],
            "exit_codes": codes,
            **beat,
        }

    def counters(self) -> dict[str, int]:
        """Read pg_stat_database on a fresh connection (one commit, published when it closes)."""
        with _fleet.connect(self.dsn) as conn:
            return _fleet.db_counters(conn, self.args.db)

    def heartbeat_window(self, fleet: _fleet.Fleet, procs: int, conc: int, window: float) -> dict[str, float]:
        """Commits per second per worker, idle and with every slot holding a sleeping task.

        pg_stat_database counts every transaction the workers commit. The
        harness reads it on short-lived connections only (a backend may keep
        its counts unpublished for up to 10 s while idle, but publishes them
        at exit), so the one commit of the first read is all it adds. Rows
        updated per commit shows whether one heartbeat statement renews all
        of a worker's leases.
        """

        def measure(settle: float) -> tuple[float, float]:
            time.sleep(settle)
            a = self.counters()
            time.sleep(window)
            b = self.counters()
            commits = b["xact_commit"] - a["xact_commit"] - 1
            return commits / window / procs, (b["tup_updated"] - a["tup_updated"]) / max(commits, 1)

        idle, _ = measure(0.0)  # the drain's counters were already waited for
        slots = procs * conc
        with _fleet.connect(self.dsn) as conn:
            self.preload(conn, slots, "bench.scale_hold", {"s": window + 3})
            deadline = time.monotonic() + 60
            while self.counts(conn).get("running", 0) < slots:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"hold tasks not all running: {self.counts(conn)}")
                time.sleep(0.05)
        holding, per_commit = measure(1.2)
        with _fleet.connect(self.dsn) as conn:
            self.wait_drained(conn, fleet, timeout=120)
        return {
            "idle_commits_per_s_per_worker": idle,
            "holding_commits_per_s_per_worker": holding,
            "rows_updated_per_commit_holding": per_commit,
        }

    # ------------------------------------------------------------ pooler
    def pooler(self) -> None:
        """K workers and M submitting clients through PgBouncer, listening over a direct alias and polling."""
        quick = self.args.quick
        k = self.args.workers or (16 if quick else 64)
        m = self.args.clients or (8 if quick else 32)
        t = self.args.n or (10_000 if quick else 100_000)
        self.result.update(workers=k, concurrency_each=4, clients=m, tasks=t, pooler=self.args.pooler)
        self.result["pgbouncer"] = _pgbouncer_config(self.args.pooler)
        modes = {"both": ("direct", ""), "listen": ("direct",), "poll": ("",)}[self.args.wakeups]
        for listen in modes:
            mode = "listen" if listen else "poll"
            with _fleet.connect(self.dsn) as conn:
                self.reset(conn)
                self.polls = 0
                env = _fleet.project_env(self.db_url, pooler=self.args.pooler, listen=listen)
                fleet = _fleet.Fleet(k, 4, env, self.logs, f"pool-{mode}", [])
                try:
                    up = fleet.wait_ready()
                    banner = fleet.banner()
                    per = [t // m + (1 if i < t % m else 0) for i in range(m)]
                    clients = _fleet.Clients([["submit", "--n", str(c)] for c in per], env, self.logs, f"pool-{mode}")
                    time.sleep(3.0)  # let the clients finish django.setup()
                    before = self.counters()
                    with _fleet.ActivitySampler(self.dsn, self.args.db) as sampler:
                        clients.go()
                        t0 = time.monotonic()
                        t1 = self.wait_drained(conn, fleet, timeout=max(300.0, t / 10), clients=clients)
                    answers = clients.results()
                    time.sleep(11.0)  # idle backends publish their counters within 10 s
                    after = self.counters()
                finally:
                    codes = fleet.stop()
                check = self.check_runs(conn, t)
            errors = sum(int(a.get("errors", 0)) for a in answers) + sum(1 for a in answers if "fatal" in a)
            run: dict[str, Any] = {
                "banner": banner,
                "startup_s": up,
                "seconds": t1 - t0,
                "tasks_per_s": t / (t1 - t0),
                "client_errors": errors,
                "client_first_errors": [e for a in answers for e in a.get("first_errors", [])][:5]
                + [a["fatal"] for a in answers if "fatal" in a][:2],
                "submit_seconds": [a.get("seconds") for a in answers],
                "server_connections": sampler.summary(),
                # Every commit on the database while the run lasted (and the
                # 11 s after), the harness's polls and samples included.
                "commits_per_task": (after["xact_commit"] - before["xact_commit"]) / t,
                "harness_polls": self.polls,
                "activity_samples": len(sampler.samples),
                "exit_codes": codes,
                **check,
            }
            self.result[mode] = run
            self.say(
                f"  {mode}: {run['tasks_per_s']:,.0f} tasks/s over {run['seconds']:.1f}s; lost {run['lost']}, "
                f"ran twice {run['ran_twice']}, client errors {errors}; server connections max "
                f"{run['server_connections']['max']}; {run['commits_per_task']:.1f} commits/task; "
                f"pickup p50 {run['pickup_p50_ms']:.0f} ms, "
                f"p95 {run['pickup_p95_ms']:.0f} ms"
            )
        self.write()

    def check_runs(self, conn: Any, t: int) -> dict[str, Any]:
        """Count tasks and handler runs: none lost, none run twice; pickup = handler start minus created."""
        counts = self.counts(conn)
        runs, distinct, over = conn.execute(_wire.sql("postgres", "scale_runs_check")).fetchone()
        picks = [float(v) for (v,) in conn.execute(_wire.sql("postgres", "scale_pickups")).fetchall()]
        return {
            "counts": counts,
            "handler_runs": int(runs),
            "distinct_tasks_run": int(distinct),
            "runs_not_first_attempt": int(over),
            "lost": t - int(distinct),
            "ran_twice": int(runs) - int(distinct),
            "pickup_p50_ms": statistics.median(picks) if picks else 0.0,
            "pickup_p95_ms": p95(picks),
        }

    # ------------------------------------------------------------ xmin
    def xmin(self) -> None:
        """The same flow of tasks with and without an idle REPEATABLE READ transaction pinning xmin."""
        quick = self.args.quick
        t = self.args.n or (20_000 if quick else 200_000)
        procs, conc = 2, 8
        self.result.update(tasks=t, workers=procs, concurrency_each=conc, flow_s=self.args.flow_s)
        for held in (False, True):
            mode = "held" if held else "baseline"
            with _fleet.connect(self.dsn) as conn:
                self.reset(conn)
                env = _fleet.project_env(self.db_url)
                fleet = _fleet.Fleet(procs, conc, env, self.logs, f"xmin-{mode}", [])
                pin = None
                try:
                    fleet.wait_ready()
                    probe = _fleet.Clients([["claim"]], env, self.logs, f"xmin-{mode}-probe")
                    time.sleep(3.0)
                    if held:
                        pin = _fleet.connect(self.dsn)
                        pin.autocommit = False
                        pin.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                        pin.execute("SELECT 1")  # takes the snapshot; the session then sits idle in it
                    before = _fleet.table_stats(conn, "cairnq_tasks")
                    if self.args.statements:
                        conn.execute("SELECT pg_stat_statements_reset()")
                    probe.go()
                    t0 = time.monotonic()
                    feeder = threading.Thread(target=self.feed, args=(t,), daemon=True)
                    feeder.start()
                    time.sleep(0.5)
                    fed = _Feeding(feeder)
                    t1 = self.wait_drained(conn, fleet, timeout=max(300.0, t / 10) + self.args.flow_s, clients=fed)
                    feeder.join()
                    answers = probe.results()
                    time.sleep(1.2)
                    after = _fleet.table_stats(conn, "cairnq_tasks")
                    statements = _fleet.top_statements(conn) if self.args.statements else []
                    held_xmin = None
                    if pin is not None:
                        row = conn.execute(_wire.sql("postgres", "scale_pinned_xmin")).fetchone()
                        held_xmin = int(row[0]) if row else 0
                finally:
                    if pin is not None:
                        pin.close()
                    codes = fleet.stop()
                counts = self.counts(conn)
            claims = [float(x) for x in answers[0].get("times_ms", [])]
            run: dict[str, Any] = {
                "seconds": t1 - t0,
                "tasks_per_s": t / (t1 - t0),
                "counts": counts,
                "claim_probe": {
                    "claims": len(claims),
                    "empty": answers[0].get("empty"),
                    "errors": answers[0].get("errors"),
                    "p50_ms": statistics.median(claims) if claims else 0.0,
                    "p95_ms": p95(claims),
                },
                "table_before": before,
                "table_after": after,
                "dead_tuple_growth": after["n_dead_tup"] - before["n_dead_tup"],
                "size_growth_bytes": after["total_bytes"] - before["total_bytes"],
                "idle_in_transaction_with_xmin": held_xmin,
                "autovacuum_runs": after["autovacuum_count"] - before["autovacuum_count"],
                "statements": statements,
                "exit_codes": codes,
            }
            self.result[mode] = run
            self.say(
                f"  {mode}: {run['tasks_per_s']:,.0f} tasks/s; claim p50 {run['claim_probe']['p50_ms']:.2f} ms, "
                f"p95 {run['claim_probe']['p95_ms']:.2f} ms ({len(claims)} claims); dead tuples "
                f"+{run['dead_tuple_growth']:,}, table +{run['size_growth_bytes'] / 1e6:.1f} MB, "
                f"{run['autovacuum_runs']} autovacuum runs"
            )
            for row in statements[:8]:
                title = row["query"].splitlines()[0][:90]
                self.say(
                    f"    {row['total_ms'] / 1000:7.1f} s  {row['calls']:>8,} calls  {row['mean_ms']:7.3f} ms mean  "
                    f"{row['blocks'] / max(1, row['calls']):8.1f} blocks/call  {title}"
                )
        base, held_run = self.result["baseline"], self.result["held"]
        self.result["rate_ratio"] = held_run["tasks_per_s"] / base["tasks_per_s"]
        self.say(f"held / baseline drain rate {self.result['rate_ratio']:.2f}x (target >= 0.7x)")
        self.write()

    def feed(self, t: int) -> None:
        """Insert the run's tasks, 1,000 per transaction, as fast as the server takes them;
        with ``--flow-s``, 100 per transaction, evenly over that many seconds."""
        with _fleet.connect(self.dsn) as conn:
            flow_s = self.args.flow_s
            if not flow_s:
                self.preload(conn, t, "bench.noop", one_txn=False)
                return
            start, batches = time.monotonic(), (t + 99) // 100
            for i in range(batches):
                time.sleep(max(0.0, start + i * flow_s / batches - time.monotonic()))
                with conn.transaction():
                    self.preload(conn, min(100, t - i * 100), "bench.noop", one_txn=False)


class _Feeding:
    """``wait_drained``'s clients for a feeder thread: done once it has inserted everything."""

    def __init__(self, feeder: threading.Thread) -> None:
        self.feeder = feeder

    def done(self) -> bool:
        return not self.feeder.is_alive()


def _pgbouncer_config(pooler: str) -> dict[str, str]:
    """Read pool_mode and default_pool_size from PgBouncer's admin console (recorded with the run)."""
    host, _, port = pooler.rpartition(":")
    try:
        with psycopg.connect(host=host, port=port, dbname="pgbouncer", user="root", autocommit=True) as conn:
            cur = conn.cursor()
            cur.execute("SHOW CONFIG")
            rows = cur.fetchall()
        return {str(r[0]): str(r[1]) for r in rows if r[0] in ("pool_mode", "default_pool_size", "max_client_conn")}
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        return {"error": str(exc)[:200]}


def _git_commit() -> str:
    import subprocess

    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], cwd=BENCH, text=True).strip()
    except Exception:  # noqa: BLE001
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["processes", "pooler", "xmin"])
    parser.add_argument("--quick", action="store_true", help="the smaller sizes (about 1-3 minutes a command)")
    parser.add_argument(
        "--pg", default="postgresql://root@127.0.0.1:5432/postgres", help="DSN of any database on the server"
    )
    parser.add_argument("--db", default="bench_scale", help="database to drop and recreate (must start with bench_)")
    parser.add_argument("--pooler", default="127.0.0.1:6432", help="PgBouncer host:port (pooler)")
    parser.add_argument("--n", type=int, default=0, help="tasks per drain (processes) or per run (pooler, xmin)")
    parser.add_argument(
        "--wakeups", choices=["both", "listen", "poll"], default="both", help="pooler: which runs (listen first)"
    )
    parser.add_argument("--workers", type=int, default=0, help="worker processes (pooler)")
    parser.add_argument("--clients", type=int, default=0, help="submitting client processes (pooler)")
    parser.add_argument(
        "--total-concurrency", type=int, default=16, help="handler slots shared by the fleet (processes)"
    )
    parser.add_argument(
        "--processes",
        type=lambda text: [int(part) for part in text.split(",")],
        default=[1, 2, 4, 8, 16],
        help="processes: the fleet sizes to run, comma-separated (default 1,2,4,8,16)",
    )
    parser.add_argument(
        "--claim-ahead", default="auto", help="processes: each worker's --claim-ahead, a number or auto (default auto)"
    )
    parser.add_argument(
        "--rounds", type=int, default=0, help="processes: rounds of every fleet size (default 3; 1 with --quick)"
    )
    parser.add_argument(
        "--lease-ms", type=int, default=3000, help="lease of the processes fleet: a heartbeat every third of it"
    )
    parser.add_argument(
        "--flow-s", type=float, default=0.0, help="xmin: spread the tasks evenly over this many seconds (0: a backlog)"
    )
    parser.add_argument(
        "--statements",
        action="store_true",
        help="xmin: report each run's statements by server time (needs pg_stat_statements preloaded on the server)",
    )
    args = parser.parse_args()
    bench = Bench(args)
    bench.say(f"fleet_scale {args.command} ({'quick' if args.quick else 'full'}), load {bench.result['load_before']}")
    bench.prepare()
    getattr(bench, args.command)()


if __name__ == "__main__":
    main()
