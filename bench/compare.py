"""A/B two commits of cairnq-django on the drains, pickup and enqueue, and print the ratios.

    .venv/bin/python bench/compare.py c4a3ff5            # c4a3ff5 against the working tree
    .venv/bin/python bench/compare.py origin/main HEAD   # two commits
    .venv/bin/python bench/compare.py c4a3ff5 --rounds 3 --only postgres --metrics drain

Each side other than the working tree gets a git worktree under
``var/compare/<sha>``. Both sides are measured by this checkout's harness
(``bench/run.py`` with ``CAIRNQ_BENCH_CODE`` pointing at the side's tree), so
only the package under test differs. Rounds alternate which side goes first,
and ``run.py`` recreates the databases for every measurement. The raw-SQL loop
runs beside each side's drains, so every drain also reads as a fraction of
the ceiling of that moment.

Prints, per dialect and figure, each side's median and spread over the rounds
and ``B / A`` (for latencies ``A / B``, so above 1.0 is always better for B);
exits 1 when a figure of B falls below ``--fail-below`` of A.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORKTREES = REPO / "var" / "compare"
WORKING_TREE = "."

# (figure, path in run.py's JSON cell, higher is better)
Figure = tuple[str, tuple[str, ...], bool]
FIGURES: dict[str, list[Figure]] = {
    "drain": [
        ("drain c1 /s", ("drain", "c1", "median"), True),
        ("drain c8 /s", ("drain", "c8", "median"), True),
        ("drain batch256 /s", ("drain", "batch256", "median"), True),
    ],
    "pickup": [
        ("pickup p50 ms", ("pickup", "p50_ms"), False),
        ("pickup p95 ms", ("pickup", "p95_ms"), False),
    ],
    "enqueue": [
        ("enqueue one /s", ("enqueue_one", "median"), True),
        ("enqueue bulk /s", ("enqueue_bulk", "median"), True),
    ],
}


@dataclass
class Side:
    label: str  # what the user named
    sha: str  # the commit ("" for the working tree)
    tree: Path
    runs: list[dict] = field(default_factory=list)  # run.py's results, one per round


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def side_for(ref: str) -> Side:
    if ref == WORKING_TREE:
        dirty = git("status", "--porcelain", "--", "cairnq_django")
        label = f"working tree ({git('rev-parse', '--short', 'HEAD')}{' + changes' if dirty else ''})"
        return Side(label, "", REPO)
    sha = git("rev-parse", "--verify", f"{ref}^{{commit}}")
    tree = WORKTREES / sha[:12]
    if not (tree / "manage.py").exists():
        WORKTREES.mkdir(parents=True, exist_ok=True)
        git("worktree", "add", "--detach", "--force", str(tree), sha)
    return Side(f"{ref} ({sha[:9]})", sha, tree)


def measure(side: Side, args: argparse.Namespace, round_no: int) -> dict:
    """Run this checkout's run.py on ``side``'s package; return its results."""
    argv = [
        sys.executable,
        str(BENCH / "run.py"),
        "--systems",
        "ours,raw",
        "--metrics",
        ",".join(args.metrics),
        "--db-prefix",
        "bench_cmp_",
        "--sqlite-dir",
        "/tmp/cairnq-bench-compare",
    ]
    argv += ["--only", args.only] if args.only else []
    argv += ["--quick"] if args.quick else []
    argv += ["--drain-n", str(args.drain_n)] if args.drain_n else []
    env = dict(os.environ, CAIRNQ_BENCH_CODE=str(side.tree))
    print(f"[round {round_no + 1}] {side.label} ...", flush=True)
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"^raw results: (.+\.json)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or not found:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"bench/run.py failed for {side.label}")
    results = json.loads(Path(found.group(1)).read_text())["results"]
    for dialect, systems in results.items():
        for system, cell in systems.items():
            for metric, error in cell.get("errors", {}).items():
                print(f"  ! {system}/{dialect} {metric}: {error}", flush=True)
    return results


def dig(cell: dict, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(cell, dict) or key not in cell:
            return None
        cell = cell[key]
    return cell if isinstance(cell, int | float) else None


def series(side: Side, dialect: str, system: str, path: tuple[str, ...]) -> list[float]:
    values = (dig(run.get(dialect, {}).get(system, {}), path) for run in side.runs)
    return [v for v in values if v is not None]


def fmt(values: list[float]) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    digits = 2 if med < 100 else 0
    spread = f" ({min(values):,.{digits}f}–{max(values):,.{digits}f})" if len(values) > 1 else ""
    return f"{med:,.{digits}f}{spread}"


def report(a: Side, b: Side, args: argparse.Namespace) -> list[str]:
    """Print the table; return the figures where B fell below --fail-below of A."""
    slides = []
    print(f"\nA = {a.label}\nB = {b.label}\nrounds = {args.rounds}\n")
    print("| dialect | figure | A median (spread) | B median (spread) | B vs A | raw loop (B's rounds) |")
    print("|---|---|---|---|---|---|")
    dialects = [args.only] if args.only else ["postgres", "sqlite"]
    for dialect in dialects:
        for metric in args.metrics:
            for label, path, higher_better in FIGURES.get(metric, []):
                va, vb = series(a, dialect, "ours", path), series(b, dialect, "ours", path)
                raw = series(b, dialect, "raw", path)
                ratio = None
                if va and vb:
                    ma, mb = statistics.median(va), statistics.median(vb)
                    ratio = (mb / ma) if higher_better else (ma / mb)
                    if ratio < args.fail_below:
                        slides.append(f"{dialect} {label}: {ratio:.2f}x")
                raw_cell = fmt(raw)
                if raw and vb and higher_better:
                    raw_cell += f" = B at {statistics.median(vb) / statistics.median(raw):.2f}x"
                shown = f"**{ratio:.2f}×**" if ratio is not None else "—"
                print(f"| {dialect} | {label} | {fmt(va)} | {fmt(vb)} | {shown} | {raw_cell} |")
    return slides


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("ref", help="side A: a commit, branch or tag")
    parser.add_argument("head", nargs="?", default=WORKING_TREE, help="side B (default: the working tree, '.')")
    parser.add_argument("--rounds", type=int, default=2, help="A/B rounds, first side alternating (default 2)")
    parser.add_argument("--only", choices=("postgres", "sqlite"), help="one dialect only")
    parser.add_argument(
        "--metrics",
        type=lambda v: [m for m in v.split(",") if m],
        default=["drain", "pickup", "enqueue"],
        help="comma-separated subset of drain,pickup,enqueue (default all three)",
    )
    parser.add_argument("--quick", action="store_true", help="run.py --quick sizes: a smoke compare")
    parser.add_argument("--drain-n", type=int, help="tasks per drain (run.py's default otherwise)")
    parser.add_argument(
        "--fail-below", type=float, default=0.9, help="exit 1 when a B figure is below this fraction of A's"
    )
    args = parser.parse_args(argv)
    unknown = set(args.metrics) - set(FIGURES)
    if unknown:
        parser.error(f"unknown metrics: {', '.join(sorted(unknown))} (choose from {', '.join(FIGURES)})")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    a, b = side_for(args.ref), side_for(args.head)
    for round_no in range(args.rounds):
        order = (a, b) if round_no % 2 == 0 else (b, a)
        for side in order:
            side.runs.append(measure(side, args, round_no))
    slides = report(a, b, args)
    if slides:
        print(f"\nB below {args.fail_below:.2f}x of A: " + "; ".join(slides))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
