"""Run the benchmark suite: cairnq-django beside its peers, on PostgreSQL and SQLite.

    .venv/bin/python bench/run.py                 # full run (~15 min on 2 cores)
    .venv/bin/python bench/run.py --quick         # smoke run (~3-4 min)
    .venv/bin/python bench/run.py --only sqlite --systems ours,upstream

Measures, per system and dialect: enqueue rate (one at a time; bulk), drain
rate of queued no-op tasks with one worker process (single-task handlers at
concurrency 1 and 8, and batch=256; median of 3), pickup latency of an idle
worker (p50/p95), the idle worker's CPU and RSS, claim cost on a table holding
1,000,000 terminal rows and 20,000 backing-off tasks against an empty one, and
(ours only) peak RSS draining 1 MB payloads under ``--max-in-flight-bytes`` and
the lateness of delayed tasks (handler start minus run_at, p50/p95), and fleet
limits: a drain under a limit that never binds against the same drain without,
and the latency of a keyed fleet-limited claim with 10,000 keys queued.
Prints a table with the ratios issue 7 sets as targets and writes everything to
``bench/results/<UTC timestamp>.json``. See ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import queue
import random
import statistics
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _profile
import _report
import _tables
from _harness import BENCH, CODE, Client, Probe, Worker, now, tail
from _systems import ORDER, SYSTEMS, Mode, System, worker_env

DIALECTS = ("postgres", "sqlite")

# The fleet metric's drains (ours): the plain no-op handler, and the same
# handler under a fleet limit no drain reaches; each worker serves its one name.
# Both sides without claiming ahead: a fleet-limited name never claims ahead
# (a task waiting in this worker would hold a unit of the fleet's limit that
# an idle worker elsewhere could use), and an unlimited short one does by
# default, so on defaults the ratio would measure claiming ahead, not the
# limit. Claimed one call at a time, they differ in the limit's check alone.
FLEET_PAIRS = {
    "c1": (
        Mode("c1-plain", 1, 1, task="bench.noop", claim_ahead="0"),
        Mode("c1-limited", 1, 1, task="bench.noop_limited", claim_ahead="0"),
    ),
    "c8": (
        Mode("c8-plain", 1, 8, task="bench.noop", claim_ahead="0"),
        Mode("c8-limited", 1, 8, task="bench.noop_limited", claim_ahead="0"),
    ),
}
FLEET_CLAIM_LIMIT = 8  # rows per keyed claim: a worker at --concurrency 8 with every slot free


class Settings:
    """Sizes of one run (``--quick`` shrinks them)."""

    def __init__(self, quick: bool, drain_n: int | None, single_n: int | None) -> None:
        self.quick = quick
        self.drain_n = drain_n or (1_000 if quick else 10_000)
        # Drains paced by one task at a time (concurrency 1, or a worker that
        # only runs one at a time) use fewer tasks: their rate is set by the
        # per-task round trips, not by N, and 10,000 of them would take most of
        # the run's time budget on a loaded 2-core machine.
        self.drain_single_n = single_n or (300 if quick else 2_000)
        self.drain_reps = 1 if quick else 5
        self.enqueue_one_n = 200 if quick else 1_000
        self.enqueue_bulk_n = 2_000 if quick else 10_000
        self.enqueue_reps = 1 if quick else 5
        self.trials = 10 if quick else 30
        self.history = 100_000 if quick else 1_000_000
        self.backoff = 2_000 if quick else 20_000
        self.claims = 50 if quick else 200
        self.big_tasks = 40 if quick else 200
        self.big_payload = 1_000_000
        # Fleet drains use the 10,000 at both concurrencies (a c1
        # drain of them takes ~10 s).
        self.fleet_drain_n = drain_n or (1_000 if quick else 10_000)
        self.fleet_keys = 1_000 if quick else 10_000
        self.fleet_tasks_per_key = 2
        self.fleet_claims = 50 if quick else 300
        # Each claim's calls finish this many claims later: 8 claims of 8 calls
        # are always running, as in a fleet of 8 busy workers at --concurrency 8.
        self.fleet_live_claims = 8


class Run:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.s = Settings(args.quick, args.drain_n, args.single_n)
        self.stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.out_dir = BENCH / "results"
        self.logs = self.out_dir / "logs" / self.stamp
        self.logs.mkdir(parents=True, exist_ok=True)
        self.sqlite_dir = Path(args.sqlite_dir)
        self.sqlite_dir.mkdir(parents=True, exist_ok=True)
        self.probe = Probe()
        self.results: dict[str, dict[str, dict[str, Any]]] = {d: {} for d in DIALECTS}
        self.checkpoints = True  # until the server refuses one

    # ------------------------------------------------------------ plumbing
    def say(self, msg: str) -> None:
        print(f"[{datetime.now(timezone.utc):%H:%M:%S}] {msg}", flush=True)

    def db(self, system: System, dialect: str, purpose: str = "main") -> str:
        name = f"{self.args.db_prefix}{system.key}" if purpose == "main" else f"{self.args.db_prefix}{purpose}"
        if dialect == "postgres":
            return _tables.pg_url(self.args.pg, name)
        return str(self.sqlite_dir / f"{name}.sqlite3")

    def cell(self, dialect: str, system: System) -> dict[str, Any]:
        return self.results[dialect].setdefault(system.key, {"errors": {}})

    def guarded(self, dialect: str, system: System, metric: str, fn: Any) -> None:
        """Run one measurement; a failure becomes an error cell, never the end of the run."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - any failure becomes that cell's error
            self.cell(dialect, system)["errors"][metric] = f"{type(exc).__name__}: {exc}"[:600]
            self.say(f"  ! {system.key}/{dialect} {metric}: {exc}")
            with open(self.logs / "harness-errors.log", "a") as log:
                traceback.print_exc(file=log)

    def client(
        self, system: System, dialect: str, db: str, tag: str, env: dict[str, str] | None = None
    ) -> Client:
        return Client(
            system.client(dialect, db),
            self.logs / f"{system.key}-{dialect}-{tag}-client.log",
            env={"BENCH_DIALECT": dialect, "BENCH_DB": db, **(env or {})},
        )

    def worker(
        self, system: System, dialect: str, db: str, mode: Mode, tag: str, each: bool, extra: list[str] | None = None
    ) -> Worker:
        env = worker_env(system, dialect, db, mode)
        env["BENCH_PROBE"] = self.probe.address
        env["BENCH_PROBE_MODE"] = "each" if each else "first"
        argv = system.worker(dialect, db, mode) + (extra or [])
        return Worker(argv, self.logs / f"{system.key}-{dialect}-{tag}-worker.log", env)

    def tables(self, system: System, dialect: str, db: str) -> Any:
        if system.protocol_tables:
            return _tables.Tables(dialect, db)
        return _tables.Foreign(dialect, db, system.foreign_prefix)

    def reset(self, system: System, dialect: str, db: str, client: Client) -> None:
        """Empty the system's queue before a measurement, and settle the server."""
        if system.protocol_tables:
            t = _tables.Tables(dialect, db)
            try:
                t.reset()
            finally:
                t.close()
        else:
            client.call("reset")
        # Every repetition of every system starts right after a checkpoint, so
        # none runs into one (see bench/sql/postgres/checkpoint.sql).
        if dialect == "postgres" and self.checkpoints and not _tables.checkpoint(self.args.pg):
            self.checkpoints = False
            self.say("  note: this role may not CHECKPOINT; measurements may overlap server checkpoints")

    def preload(
        self,
        system: System,
        dialect: str,
        db: str,
        client: Client,
        n: int,
        name: str,
        payload: dict[str, Any] | None = None,
    ) -> None:
        if system.protocol_tables:
            t = _tables.Tables(dialect, db)
            try:
                t.preload(n, name, payload)
            finally:
                t.close()
        else:
            client.call("preload", n=n, name=name)

    # ------------------------------------------------------------ setup
    def prepare(self, system: System, dialect: str) -> None:
        """Install the peer, create its fresh database and schema."""
        system.ensure_venv(self.logs / f"{system.key}-install.log")
        db = self.db(system, dialect)
        if dialect == "postgres":
            _tables.fresh_pg(self.args.pg, f"{self.args.db_prefix}{system.key}")
        else:
            _tables.fresh_sqlite(db)
        self.install_schema(system, dialect, db)

    def install_schema(self, system: System, dialect: str, db: str) -> None:
        installer = SYSTEMS["upstream"] if system.schema_by == "upstream" else system
        if installer is not system:
            installer.ensure_venv(self.logs / f"{installer.key}-install.log")
        with self.client(installer, dialect, db, "setup") as c:
            c.call("setup")

    def open_clients(
        self, stack: contextlib.ExitStack, dialect: str, systems: list[System], metric: str
    ) -> dict[str, Client]:
        """Start one client per system for a measurement taken in rounds, closed with ``stack``.

        A system whose client fails to start gets a ``metric`` error and no entry.
        """
        clients: dict[str, Client] = {}
        for system in systems:

            def start(s: System = system) -> None:
                clients[s.key] = stack.enter_context(self.client(s, dialect, self.db(s, dialect), metric))

            self.guarded(dialect, system, metric, start)
        return clients

    def reset_all(self, dialect: str, systems: list[System], clients: dict[str, Client]) -> None:
        """Empty the queue of every system that still has a client, after a measurement."""
        for system in systems:
            if system.key in clients:
                self.reset(system, dialect, self.db(system, dialect), clients[system.key])

    # ------------------------------------------------------------ measurements
    def enqueue(self, dialect: str, systems: list[System]) -> None:
        """Enqueue rates (one at a time, and bulk) of every system, in rounds.

        The targets are ratios between systems, and this machine's speed drifts
        by a fifth over minutes: one system's three runs, then the next's, let
        that drift into the ratio. So each round measures every system once,
        and a system's median is taken over its runs from all rounds.
        """
        runs: dict[str, dict[str, list[float]]] = {s.key: {"one": [], "bulk": []} for s in systems}
        with contextlib.ExitStack() as stack:
            clients = self.open_clients(stack, dialect, systems, "enqueue")
            for _ in range(self.s.enqueue_reps):
                for system in systems:
                    if system.key in clients:
                        self.guarded(
                            dialect,
                            system,
                            "enqueue",
                            lambda s=system: self.enqueue_round(s, dialect, clients[s.key], runs[s.key]),
                        )
                        if "enqueue" in self.cell(dialect, system)["errors"]:
                            del clients[system.key]  # a failed client sits out the later rounds
            self.reset_all(dialect, systems, clients)
        for system in systems:
            one, bulk = runs[system.key]["one"], runs[system.key]["bulk"]
            if not one:
                continue
            cell = self.cell(dialect, system)
            cell["enqueue_one"] = {"runs": one, "median": statistics.median(one), "n": self.s.enqueue_one_n}
            if bulk:
                cell["enqueue_bulk"] = {"runs": bulk, "median": statistics.median(bulk), "n": self.s.enqueue_bulk_n}
            self.say(
                f"  {system.key}/{dialect} enqueue one {cell['enqueue_one']['median']:.0f}/s"
                + (f", bulk {cell['enqueue_bulk']['median']:.0f}/s" if bulk else "")
                + f" (rounds: one {', '.join(f'{r:.0f}' for r in one)}"
                + (f"; bulk {', '.join(f'{r:.0f}' for r in bulk)})" if bulk else ")")
            )

    def enqueue_round(self, system: System, dialect: str, client: Client, runs: dict[str, list[float]]) -> None:
        """One round's enqueue runs of one system, each on an emptied queue."""
        db = self.db(system, dialect)
        self.reset(system, dialect, db, client)
        runs["one"].append(client.call("enqueue_one", n=self.s.enqueue_one_n)["per_s"])
        if system.bulk:
            self.reset(system, dialect, db, client)
            runs["bulk"].append(client.call("enqueue_bulk", n=self.s.enqueue_bulk_n, chunk=1000)["per_s"])

    def drains(self, dialect: str, systems: list[System]) -> None:
        """Drain rates of every system in every mode, in rounds, as ``enqueue`` does.

        Each round drains once per (system, mode); a median is taken over a
        pair's runs from all rounds, so the machine's drift over minutes
        reaches every system alike instead of deciding a ratio.
        """
        wanted = self.args.modes.split(",") if self.args.modes else None
        pairs = [
            (system, mode) for system in systems for mode in system.modes if wanted is None or mode.key in wanted
        ]
        runs: dict[tuple[str, str], list[float]] = {(s.key, m.key): [] for s, m in pairs}
        costs: dict[tuple[str, str], list[dict[str, float]]] = {(s.key, m.key): [] for s, m in pairs}
        with contextlib.ExitStack() as stack:
            clients = self.open_clients(stack, dialect, systems, "drain")
            profiled = [(s, m) for s, m in pairs if s.key in self.args.profile]
            # With --profile, one more drain per mode runs under py-spy after
            # the rounds; it is not counted.
            rounds = [(pairs, False)] * self.s.drain_reps + ([(profiled, True)] if profiled else [])
            for todo, profile in rounds:
                for system, mode in todo:
                    metric = f"drain_{mode.key}"
                    if system.key not in clients or metric in self.cell(dialect, system)["errors"]:
                        continue  # a failed pair sits out the later rounds
                    key = (system.key, mode.key)
                    self.guarded(
                        dialect,
                        system,
                        metric,
                        lambda s=system, m=mode, k=key, p=profile: self.drain_once(
                            s, dialect, m, clients[s.key], runs[k], costs[k], profile=p
                        ),
                    )
            self.reset_all(dialect, systems, clients)
        for system, mode in pairs:
            found = runs[(system.key, mode.key)]
            if not found:
                continue
            drains = self.cell(dialect, system).setdefault("drain", {})
            drains[mode.key] = {"runs": found, "median": statistics.median(found), "n": self.drain_size(system, mode)}
            cost = costs[(system.key, mode.key)]
            if cost:
                drains[mode.key]["db_cost"] = {k: statistics.median(c[k] for c in cost) for k in cost[0]}
            self.say(
                f"  {system.key}/{dialect} drain {mode.key}: {statistics.median(found):,.0f}/s "
                f"(rounds {', '.join(f'{r:,.0f}' for r in found)})"
            )

    def drain_size(self, system: System, mode: Mode) -> int:
        paced = (mode.concurrency == 1 and mode.batch == 1) or system.paced
        return min(self.s.drain_n, self.s.drain_single_n) if paced else self.s.drain_n

    def drain_once(
        self,
        system: System,
        dialect: str,
        mode: Mode,
        client: Client,
        runs: list[float],
        costs: list[dict[str, float]],
        *,
        profile: bool,
        n: int | None = None,
    ) -> None:
        """One drain of ``n`` preloaded tasks by a fresh worker: its rate, or (profile) its py-spy profile."""
        db = self.db(system, dialect)
        n = n or self.drain_size(system, mode)
        self.reset(system, dialect, db, client)
        self.preload(system, dialect, db, client, n, mode.task_name)
        before = self.pg_stats(system, dialect)
        poll = self.tables(system, dialect, db)
        polls = 0
        self.probe.clear()
        tag = f"drain-{mode.key}-" + ("profile" if profile else str(len(runs)))
        w = self.worker(system, dialect, db, mode, tag, each=False)
        spy = None
        try:
            t0 = self.probe.wait(timeout=120)
            if profile:
                # Attached once work has started, so start-up imports stay out of it.
                spy = _profile.start(w.pid, self.logs / f"profile-{system.key}-{dialect}-{mode.key}.txt")
            deadline = t0 + max(120.0, n / 40)
            while poll.live():
                polls += 1
                if now() > deadline:
                    raise TimeoutError(f"not drained within {deadline - t0:.0f}s: {poll.counts()}")
                if not w.alive():
                    raise RuntimeError(f"worker exited ({w.proc.returncode}): {tail(w.log)}")
                time.sleep(0.005)
            t1 = now()
        finally:
            w.stop()
        try:
            counts = poll.counts()
        finally:
            poll.close()
        if counts.get("succeeded", 0) != n:
            raise RuntimeError(f"expected {n} succeeded, found {counts}")
        if spy is not None:
            found = _profile.finish(spy)
            self.cell(dialect, system).setdefault("profiles", {})[mode.key] = found
            self.say(f"  {system.key}/{dialect} drain {mode.key} profile: {found['file']}")
            return
        if before is not None:
            # The harness's own polls are transactions on this database too.
            costs.append(self.pg_cost(system, before, n, harness_xacts=polls + 2))
        runs.append(n / (t1 - t0))

    def pg_stats(self, system: System, dialect: str) -> dict[str, int] | None:
        """Snapshot the system's database counters (PostgreSQL only)."""
        if dialect != "postgres":
            return None
        time.sleep(0.3)  # let backends that just closed flush their counters
        return _tables.db_counters(self.args.pg, f"{self.args.db_prefix}{system.key}")

    def pg_cost(self, system: System, before: dict[str, int], n: int, harness_xacts: int) -> dict[str, float]:
        """Return commits and written tuples per task since ``before``."""
        after = self.pg_stats(system, "postgres")
        assert after is not None
        delta = {k: after[k] - before[k] for k in before}
        return {
            "commits_per_task": max(0, delta["xact_commit"] - harness_xacts) / n,
            "tuples_written_per_task": (delta["tup_inserted"] + delta["tup_updated"] + delta["tup_deleted"]) / n,
        }

    def pickup(self, system: System, dialect: str) -> None:
        db = self.db(system, dialect)
        mode = system.modes[0]
        with self.client(system, dialect, db, "pickup") as c:
            self.reset(system, dialect, db, c)
            self.probe.clear()
            w = self.worker(system, dialect, db, mode, "pickup", each=True)
            try:
                # A first task proves the worker is up; then let it go idle.
                c.call("submit", t=-1)
                self.probe.wait("-1", timeout=120)
                time.sleep(2.0)
                cpu0, t_cpu0 = w.cpu_seconds(), now()
                time.sleep(5.0 if not self.s.quick else 2.0)
                idle_cpu = (w.cpu_seconds() - cpu0) / (now() - t_cpu0) * 100
                idle_mem = w.memory()
                lat = []
                for t in range(self.s.trials):
                    # Random spacing over a whole second after the previous pickup,
                    # so a polling worker is met at a uniformly random point of
                    # its 0.5 s or 1 s sleep (no phase-lock with the interval).
                    time.sleep(random.uniform(0.25, 1.25))
                    t_commit = c.call("submit", t=t)["t_after"]
                    started = self.probe.wait(str(t), timeout=30)
                    lat.append((started - t_commit) * 1000)
            finally:
                w.stop()
            self.reset(system, dialect, db, c)
        q = statistics.quantiles(lat, n=100, method="inclusive")
        self.cell(dialect, system)["pickup"] = {
            "p50_ms": statistics.median(lat),
            "p95_ms": q[94],
            "trials_ms": lat,
            "idle_cpu_pct": idle_cpu,
            "idle_rss_mb": idle_mem["rss_mb"],
        }
        self.say(
            f"  {system.key}/{dialect} pickup p50 {statistics.median(lat):.2f} ms, p95 {q[94]:.2f} ms; "
            f"idle {idle_cpu:.2f}% CPU, {idle_mem['rss_mb']:.0f} MB"
        )

    def lateness(self, system: System, dialect: str) -> None:
        """How long after its run_at a delayed task starts on an idle worker (default poll interval).

        Two patterns, each over ``n`` tasks: ``batch`` submits them all in one
        transaction with delays spread over a few seconds, so due times fall at
        every point of the poll interval; ``trickle`` submits one every 37 ms,
        each delayed 0.1-1.5 s, so submits keep waking the worker while earlier
        tasks come due (the pattern that once made them start up to 140 ms late).
        """
        db = self.db(system, dialect)
        mode = system.modes[0]
        n = 40 if self.s.quick else 200
        figures: dict[str, dict[str, Any]] = {}
        with self.client(system, dialect, db, "lateness") as c:
            for pattern in ("batch", "trickle"):
                self.reset(system, dialect, db, c)
                self.probe.clear()
                w = self.worker(system, dialect, db, mode, f"lateness-{pattern}", each=True)
                try:
                    c.call("submit", t=-1)
                    self.probe.wait("-1", timeout=120)
                    time.sleep(1.0)  # idle: past its first empty claim
                    run_at, delays = self._submit_delayed(c, pattern, n)
                    started = self._wait_started(run_at, timeout=60)
                finally:
                    w.stop()
                late = [(started[tag] - run_at[tag]) * 1000 for tag in run_at]
                q = statistics.quantiles(late, n=100, method="inclusive")
                figures[pattern] = {
                    "p50_ms": statistics.median(late),
                    "p95_ms": q[94],
                    "min_ms": min(late),
                    "max_ms": max(late),
                    "trials_ms": late,
                    "delays_ms": delays,
                }
                self.say(
                    f"  {system.key}/{dialect} delayed-task lateness ({pattern}) p50 {statistics.median(late):.2f} ms, "
                    f"p95 {q[94]:.2f} ms, max {max(late):.2f} ms (earliest {min(late):.2f} ms)"
                )
            self.reset(system, dialect, db, c)
        # The batch pattern's figures stay at the top level, where earlier runs kept them.
        self.cell(dialect, system)["lateness"] = {**figures["batch"], "trickle": figures["trickle"]}

    @staticmethod
    def _submit_delayed(c: Any, pattern: str, n: int) -> tuple[dict[str, float], list[int]]:
        """Submit ``n`` delayed tasks in ``pattern``; their run_at on the probe's clock, and the delays."""
        if pattern == "batch":
            delays = [random.randint(200, 5000) for _ in range(n)]
            run_at = c.call("submit_delayed", tasks=[[t, d] for t, d in enumerate(delays)])["run_at"]
            return run_at, delays
        delays, run_at = [], {}
        next_at = now()
        for t in range(n):
            delay = random.randint(100, 1500)
            delays.append(delay)
            run_at.update(c.call("submit_delayed", tasks=[[t, delay]])["run_at"])
            next_at += 0.037
            time.sleep(max(0.0, next_at - now()))
        return run_at, delays

    def _wait_started(self, run_at: dict[str, float], timeout: float) -> dict[str, float]:
        """When each tagged task's handler started, from the probe's events."""
        started: dict[str, float] = {}
        deadline = now() + timeout
        while len(started) < len(run_at):
            if now() > deadline:
                raise TimeoutError(f"{len(run_at) - len(started)} delayed tasks never started")
            try:
                tag, at, _count = self.probe.events.get(timeout=1.0)
            except queue.Empty:
                continue
            if tag in run_at:
                started[tag] = at
        return started

    def claim_tables(self, dialect: str) -> dict[str, str]:
        """Build (or reuse) the empty and the large claim-cost databases of a dialect."""
        size = "quick" if self.s.quick else "full"
        dbs = {"empty": "claim_empty", "big": f"claim_big_{size}"}
        out = {}
        installer = SYSTEMS["upstream"]
        for kind, purpose in dbs.items():
            name = f"{self.args.db_prefix}{purpose}"
            db = (
                _tables.pg_url(self.args.pg, name)
                if dialect == "postgres"
                else str(self.sqlite_dir / f"{name}.sqlite3")
            )
            out[kind] = db
            want = {} if kind == "empty" else {"terminal": self.s.history, "backoff": self.s.backoff}
            if self._claim_db_ready(dialect, db, name, want):
                continue
            self.say(f"  building {kind} claim table on {dialect} ({want or 'no rows'})")
            if dialect == "postgres":
                _tables.fresh_pg(self.args.pg, name)
            else:
                _tables.fresh_sqlite(db)
            installer.ensure_venv(self.logs / "upstream-install.log")
            with self.client(installer, dialect, db, f"setup-{kind}") as c:
                c.call("setup")
            t = _tables.Tables(dialect, db)
            try:
                t.reset()
                if want:
                    t.fill_history(want["terminal"], want["backoff"])
            finally:
                t.close()
        return out

    def _claim_db_ready(self, dialect: str, db: str, name: str, want: dict[str, int]) -> bool:
        if self.args.rebuild_claim_tables:
            return False
        if dialect == "postgres" and not _tables.pg_exists(self.args.pg, name):
            return False
        if dialect == "sqlite" and not Path(db).exists():
            return False
        try:
            t = _tables.Tables(dialect, db)
            counts = t.counts()
            t.close()
        except Exception:  # noqa: BLE001 - an unreadable table is rebuilt
            return False
        terminal = sum(counts.get(s, 0) for s in ("succeeded", "failed", "canceled"))
        return (
            terminal == want.get("terminal", 0)
            and counts.get("queued", 0) == want.get("backoff", 0)
            and counts.get("running", 0) == 0
        )

    def claim_cost(self, system: System, dialect: str, dbs: dict[str, str]) -> None:
        """Time one-task claims on the empty and the large table, in alternating rounds.

        Alternating keeps a burst of load from the rest of the machine from
        landing on one table only; each round claims the probes it inserted.
        """
        rounds = 5
        per_round = max(1, self.s.claims // rounds)
        times: dict[str, list[float]] = {"empty": [], "big": []}
        clients: dict[str, Client] = {}
        try:
            for kind in ("empty", "big"):
                if system.key == "ours":
                    # Our migrate adopts a schema the upstream SDK installed (protocol 1.11).
                    with self.client(system, dialect, dbs[kind], f"setup-claim-{kind}") as c:
                        c.call("setup")
                clients[kind] = self.client(system, dialect, dbs[kind], f"claim-{kind}")
            for _ in range(rounds):
                for kind in ("empty", "big"):
                    t = _tables.Tables(dialect, dbs[kind])
                    try:
                        t.delete_probes()
                        t.preload(per_round, "bench.noop")
                        times[kind] += clients[kind].call("claim_cost", k=per_round)["times_ms"]
                    finally:
                        t.delete_probes()
                        t.close()
        finally:
            for c in clients.values():
                c.close()
        cell: dict[str, Any] = {}
        for kind, values in times.items():
            cell[f"{kind}_ms"] = statistics.median(values)
            cell[f"{kind}_mean_ms"] = statistics.fmean(values)
        cell["ratio"] = cell["big_ms"] / cell["empty_ms"] if cell["empty_ms"] else None
        cell["claims"] = len(times["big"])
        cell["history"] = {"terminal": self.s.history, "backoff": self.s.backoff}
        self.cell(dialect, system)["claim"] = cell
        self.say(
            f"  {system.key}/{dialect} claim {cell['empty_ms']:.3f} ms empty, {cell['big_ms']:.3f} ms big "
            f"(x{cell['ratio']:.2f})"
        )

    def memory_budget(self, system: System, dialect: str) -> None:
        """Drain 1 MB payloads with ``--max-in-flight-bytes 64MB``; record the worker's peak RSS."""
        db = self.db(system, dialect)
        n = self.s.big_tasks
        mode = Mode("c8", 1, 8)
        budget = 64 * 1024 * 1024
        with self.client(system, dialect, db, "memory") as c:
            self.reset(system, dialect, db, c)
            self.preload(system, dialect, db, c, n, "bench.big", {"blob": "x" * self.s.big_payload})
            poll = self.tables(system, dialect, db)
            self.probe.clear()
            w = self.worker(
                system, dialect, db, mode, "memory", each=False, extra=["--max-in-flight-bytes", str(budget)]
            )
            peak = 0.0
            try:
                t0 = self.probe.wait(timeout=120)
                while poll.live():
                    if not w.alive():
                        raise RuntimeError(f"worker exited ({w.proc.returncode}): {tail(w.log)}")
                    if now() - t0 > 300:
                        raise TimeoutError("1 MB payloads not drained within 300 s")
                    peak = max(peak, w.memory()["peak_mb"])
                    time.sleep(0.05)
                peak = max(peak, w.memory()["peak_mb"])
            finally:
                w.stop()
                poll.close()
            self.reset(system, dialect, db, c)
        self.cell(dialect, system)["memory_budget"] = {
            "peak_rss_mb": peak,
            "tasks": n,
            "payload_bytes": self.s.big_payload,
            "max_in_flight_bytes": budget,
            "concurrency": mode.concurrency,
        }
        self.say(f"  {system.key}/{dialect} 1 MB payloads under a 64 MB budget: peak RSS {peak:.0f} MB")

    def fleet_drains(self, system: System, dialect: str) -> None:
        """Drains under a fleet limit that never binds against the same drains without one, in rounds.

        Each round drains both handlers at each concurrency, which of the two
        goes first alternating from round to round; every drain starts with
        an empty start log. The ratio is of the medians, limited over plain.
        """
        db = self.db(system, dialect)
        n = self.s.fleet_drain_n
        modes = [mode for pair in FLEET_PAIRS.values() for mode in pair]
        runs: dict[str, list[float]] = {m.key: [] for m in modes}
        costs: dict[str, list[dict[str, float]]] = {m.key: [] for m in modes}
        with self.client(system, dialect, db, "fleet-drain", env={"BENCH_FLEET": "1"}) as c:
            for r in range(self.s.drain_reps):
                for plain, limited in FLEET_PAIRS.values():
                    for mode in (plain, limited) if r % 2 == 0 else (limited, plain):
                        self.reset_fleet(dialect, db)
                        self.drain_once(
                            system, dialect, mode, c, runs[mode.key], costs[mode.key], profile=False, n=n
                        )
            self.reset(system, dialect, db, c)
            self.reset_fleet(dialect, db)
        drains: dict[str, Any] = {}
        for column, (plain, limited) in FLEET_PAIRS.items():
            entry: dict[str, Any] = {"n": n, "concurrency": plain.concurrency}
            for role, mode in (("plain", plain), ("limited", limited)):
                found = runs[mode.key]
                entry[role] = {"task": mode.task, "runs": found, "median": statistics.median(found)}
                cost = costs[mode.key]
                if cost:
                    entry[role]["db_cost"] = {k: statistics.median(x[k] for x in cost) for k in cost[0]}
            entry["ratio"] = entry["limited"]["median"] / entry["plain"]["median"]
            drains[column] = entry
            limited_runs = ", ".join(f"{v:,.0f}" for v in entry["limited"]["runs"])
            plain_runs = ", ".join(f"{v:,.0f}" for v in entry["plain"]["runs"])
            self.say(
                f"  {system.key}/{dialect} fleet drain {column}: limit never binding "
                f"{entry['limited']['median']:,.0f}/s, none {entry['plain']['median']:,.0f}/s "
                f"(x{entry['ratio']:.2f}; rounds limited {limited_runs}; none {plain_runs})"
            )
        self.cell(dialect, system).setdefault("fleet", {})["drain"] = drains

    def fleet_claim(self, system: System, dialect: str) -> None:
        """Time keyed fleet-limited claims with ``fleet_keys`` distinct keys queued (``ours.py fleet_claim``)."""
        db = self.db(system, dialect)
        s = self.s
        with self.client(system, dialect, db, "fleet-claim", env={"BENCH_FLEET": "1"}) as c:
            self.reset(system, dialect, db, c)
            self.reset_fleet(dialect, db)
            try:
                queued = c.call("submit_keyed", keys=s.fleet_keys, per_key=s.fleet_tasks_per_key)["tasks"]
                t = _tables.Tables(dialect, db)
                try:
                    t.analyze()
                finally:
                    t.close()
                found = c.call(
                    "fleet_claim", k=s.fleet_claims, limit=FLEET_CLAIM_LIMIT, live_claims=s.fleet_live_claims
                )
            finally:
                self.reset(system, dialect, db, c)
                self.reset_fleet(dialect, db)
        times = found["times_ms"]
        q = statistics.quantiles(times, n=100, method="inclusive")
        self.cell(dialect, system).setdefault("fleet", {})["claim"] = {
            "p50_ms": statistics.median(times),
            "p99_ms": q[98],
            "max_ms": max(times),
            "mean_ms": statistics.fmean(times),
            "claims": len(times),
            "rows_per_claim": FLEET_CLAIM_LIMIT,
            "keys": s.fleet_keys,
            "tasks_queued": queued,
            "live_calls": s.fleet_live_claims * FLEET_CLAIM_LIMIT,
            "times_ms": times,
        }
        self.say(
            f"  {system.key}/{dialect} keyed fleet claim ({s.fleet_keys:,} keys, {queued:,} tasks queued): "
            f"p50 {statistics.median(times):.2f} ms, p99 {q[98]:.2f} ms, max {max(times):.2f} ms"
        )

    def reset_fleet(self, dialect: str, db: str) -> None:
        t = _tables.Tables(dialect, db)
        try:
            t.reset_fleet()
        finally:
            t.close()

    # ------------------------------------------------------------ driver
    def main(self) -> int:
        dialects = [d for d in DIALECTS if self.args.only in (None, d)]
        systems = [SYSTEMS[k] for k in ORDER if k in self.args.systems]
        metrics = set(self.args.metrics)
        started = time.time()
        for dialect in dialects:
            self.say(f"== {dialect}")
            present = [s for s in systems if dialect in s.dialects]
            ready = []
            for system in present:
                before = len(self.cell(dialect, system)["errors"])
                self.guarded(dialect, system, "setup", lambda s=system, d=dialect: self.prepare(s, d))
                if len(self.cell(dialect, system)["errors"]) == before:
                    ready.append(system)
            if "enqueue" in metrics:
                self.enqueue(dialect, ready)
            if "drain" in metrics:
                self.drains(dialect, ready)
            for system in ready:
                if "pickup" in metrics:
                    self.guarded(dialect, system, "pickup", lambda s=system, d=dialect: self.pickup(s, d))
                if "lateness" in metrics and system.key == "ours":
                    self.guarded(dialect, system, "lateness", lambda s=system, d=dialect: self.lateness(s, d))
                if "memory" in metrics and system.key == "ours":
                    self.guarded(dialect, system, "memory_budget", lambda s=system, d=dialect: self.memory_budget(s, d))
                if "fleet" in metrics and system.key == "ours":
                    self.guarded(dialect, system, "fleet_drain", lambda s=system, d=dialect: self.fleet_drains(s, d))
                    self.guarded(dialect, system, "fleet_claim", lambda s=system, d=dialect: self.fleet_claim(s, d))
            claimers = [s for s in ready if s.protocol_tables]
            if "claim" in metrics and claimers:
                dbs: dict[str, str] = {}
                try:
                    dbs = self.claim_tables(dialect)
                except Exception as exc:  # noqa: BLE001 - reported in every claimer's cell
                    for system in claimers:
                        self.cell(dialect, system)["errors"]["claim"] = f"claim tables: {exc}"
                for system in claimers if dbs else []:
                    self.guarded(dialect, system, "claim", lambda s=system, d=dialect, b=dbs: self.claim_cost(s, d, b))
        meta = {
            "timestamp": self.stamp,
            "quick": self.s.quick,
            "seconds": round(time.time() - started, 1),
            "settings": vars(self.s),
            "host": platform.node(),
            "python": platform.python_version(),
            "cpus": __import__("os").cpu_count(),
            "pg": self.args.pg,
            "sqlite_dir": str(self.sqlite_dir),
            "systems": {
                k: {"label": SYSTEMS[k].label, "requirements": SYSTEMS[k].requirements, "notes": SYSTEMS[k].notes}
                for k in self.args.systems
            },
            "logs": str(self.logs),
            "repo": _repo_state(),
        }
        payload = {"meta": meta, "results": self.results, "targets": _report.targets(self.results)}
        out = self.out_dir / f"{self.stamp}.json"
        out.write_text(json.dumps(payload, indent=2))
        # The same tables as Markdown, ready for docs/performance.md.
        out.with_suffix(".md").write_text(_report.markdown(payload))
        print()
        print(_report.render(payload))
        print(f"\nraw results: {out}")
        return 0


def _repo_state() -> dict[str, Any]:
    """Return the commit measured and how many files of the package differ from it."""
    import subprocess

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], check=False, cwd=CODE, capture_output=True, text=True)
        return done.stdout.strip()

    changed = [line for line in git("status", "--porcelain", "--", "cairnq_django").splitlines() if line]
    return {"head": git("rev-parse", "HEAD"), "cairnq_django_files_changed": len(changed)}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer tasks and trials: a smoke run")
    parser.add_argument("--only", choices=DIALECTS, help="one dialect only")
    parser.add_argument(
        "--systems",
        type=lambda v: [s for s in v.split(",") if s],
        default=list(ORDER),
        help=f"comma-separated subset of {','.join(ORDER)}",
    )
    parser.add_argument(
        "--metrics",
        type=lambda v: [s for s in v.split(",") if s],
        default=["enqueue", "drain", "pickup", "lateness", "claim", "memory", "fleet"],
        help="comma-separated subset of enqueue,drain,pickup,lateness,claim,memory,fleet",
    )
    parser.add_argument("--drain-n", type=int, help="tasks per drain (default 10,000; --quick 1,000)")
    parser.add_argument("--modes", help="drain modes to run, comma-separated (c1,c8,batch256; default all)")
    parser.add_argument(
        "--single-n",
        type=int,
        help="tasks per paced drain: c1 modes, django-tasks-db and procrastinate (default 2,000; --quick 300)",
    )
    parser.add_argument(
        "--profile",
        type=lambda v: [s for s in v.split(",") if s],
        default=[],
        help="systems whose worker gets one extra, uncounted drain per mode under py-spy "
        "(e.g. --profile ours); summaries go to the JSON, raw stacks to the logs folder",
    )
    parser.add_argument(
        "--pg",
        default="postgresql://root@127.0.0.1:5432/postgres",
        help="DSN of the PostgreSQL server (any database; bench databases are created beside it)",
    )
    parser.add_argument("--db-prefix", default="bench_", help="prefix of every database the run creates")
    parser.add_argument("--sqlite-dir", default="/tmp/cairnq-bench", help="where the SQLite files go")
    parser.add_argument(
        "--rebuild-claim-tables",
        action="store_true",
        help="rebuild the 1M-row claim-cost tables even if a previous run left them",
    )
    args = parser.parse_args(argv)
    unknown = set(args.systems) - set(ORDER)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    if not args.db_prefix.startswith("bench_"):
        parser.error("--db-prefix must start with bench_ (the harness drops databases it creates)")
    return args


if __name__ == "__main__":
    sys.exit(Run(parse()).main())
