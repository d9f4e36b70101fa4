"""Turn raw results into the printed tables and the targets (issue 7's ratios, and later issues')."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _systems import ORDER, SYSTEMS

Results = dict[str, dict[str, dict[str, Any]]]


def _get(results: Results, dialect: str, system: str, *path: str) -> float | None:
    node: Any = results.get(dialect, {}).get(system)
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, (int, float)) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# (dialect, label, value function, comparison, threshold, unit)
def _specs() -> list[tuple[str, str, Callable[[Results], float | None], str, float, str]]:
    g = _get
    return [
        (
            "postgres",
            "drain batch256: ours / pgqueuer batch256",
            lambda r: _ratio(
                g(r, "postgres", "ours", "drain", "batch256", "median"),
                g(r, "postgres", "pgqueuer", "drain", "batch256", "median"),
            ),
            ">=",
            1.2,
            "x",
        ),
        (
            "postgres",
            "drain c1: ours / upstream c1",
            lambda r: _ratio(
                g(r, "postgres", "ours", "drain", "c1", "median"), g(r, "postgres", "upstream", "drain", "c1", "median")
            ),
            ">=",
            4.0,
            "x",
        ),
        (
            "sqlite",
            "drain batch256: ours / upstream batch256",
            lambda r: _ratio(
                g(r, "sqlite", "ours", "drain", "batch256", "median"),
                g(r, "sqlite", "upstream", "drain", "batch256", "median"),
            ),
            ">=",
            8.0,
            "x",
        ),
        (
            "sqlite",
            "drain c1: ours / upstream c1",
            lambda r: _ratio(
                g(r, "sqlite", "ours", "drain", "c1", "median"), g(r, "sqlite", "upstream", "drain", "c1", "median")
            ),
            ">=",
            2.0,
            "x",
        ),
        (
            "postgres",
            "pickup p50: ours / pgqueuer",
            lambda r: _ratio(
                g(r, "postgres", "ours", "pickup", "p50_ms"), g(r, "postgres", "pgqueuer", "pickup", "p50_ms")
            ),
            "<=",
            1.0,
            "x",
        ),
        ("sqlite", "pickup p50 (ms)", lambda r: g(r, "sqlite", "ours", "pickup", "p50_ms"), "<", 25.0, "ms"),
        (
            "postgres",
            "delayed-task lateness p95, batch (ms)",
            lambda r: g(r, "postgres", "ours", "lateness", "p95_ms"),
            "<=",
            20.0,
            "ms",
        ),
        (
            "postgres",
            "delayed-task lateness p95, trickle (ms)",
            lambda r: g(r, "postgres", "ours", "lateness", "trickle", "p95_ms"),
            "<=",
            20.0,
            "ms",
        ),
        (
            "sqlite",
            "delayed-task lateness p95, batch (ms)",
            lambda r: g(r, "sqlite", "ours", "lateness", "p95_ms"),
            "<=",
            20.0,
            "ms",
        ),
        (
            "sqlite",
            "delayed-task lateness p95, trickle (ms)",
            lambda r: g(r, "sqlite", "ours", "lateness", "trickle", "p95_ms"),
            "<=",
            20.0,
            "ms",
        ),
        (
            "sqlite",
            "idle worker CPU (% of a core)",
            lambda r: g(r, "sqlite", "ours", "pickup", "idle_cpu_pct"),
            "<",
            2.0,
            "%",
        ),
        (
            "postgres",
            "idle worker CPU (% of a core)",
            lambda r: g(r, "postgres", "ours", "pickup", "idle_cpu_pct"),
            "<",
            2.0,
            "%",
        ),
        (
            "postgres",
            "enqueue one: ours / raw single insert",
            lambda r: _ratio(
                g(r, "postgres", "ours", "enqueue_one", "median"), g(r, "postgres", "raw", "enqueue_one", "median")
            ),
            ">=",
            0.8,
            "x",
        ),
        (
            "sqlite",
            "enqueue one: ours / raw single insert",
            lambda r: _ratio(
                g(r, "sqlite", "ours", "enqueue_one", "median"), g(r, "sqlite", "raw", "enqueue_one", "median")
            ),
            ">=",
            0.8,
            "x",
        ),
        (
            "postgres",
            "enqueue bulk: ours / pgqueuer bulk",
            lambda r: _ratio(
                g(r, "postgres", "ours", "enqueue_bulk", "median"),
                g(r, "postgres", "pgqueuer", "enqueue_bulk", "median"),
            ),
            ">=",
            1.0,
            "x",
        ),
        (
            "postgres",
            "claim cost: big table / empty table",
            lambda r: g(r, "postgres", "ours", "claim", "ratio"),
            "<=",
            2.0,
            "x",
        ),
        (
            "sqlite",
            "claim cost: big table / empty table",
            lambda r: g(r, "sqlite", "ours", "claim", "ratio"),
            "<=",
            2.0,
            "x",
        ),
        (
            "postgres",
            "idle worker RSS (MB)",
            lambda r: g(r, "postgres", "ours", "pickup", "idle_rss_mb"),
            "<",
            100.0,
            "MB",
        ),
        ("sqlite", "idle worker RSS (MB)", lambda r: g(r, "sqlite", "ours", "pickup", "idle_rss_mb"), "<", 100.0, "MB"),
        (
            "postgres",
            "RSS, 1 MB payloads, 64 MB budget (MB)",
            lambda r: g(r, "postgres", "ours", "memory_budget", "peak_rss_mb"),
            "<",
            250.0,
            "MB",
        ),
        (
            "sqlite",
            "RSS, 1 MB payloads, 64 MB budget (MB)",
            lambda r: g(r, "sqlite", "ours", "memory_budget", "peak_rss_mb"),
            "<",
            250.0,
            "MB",
        ),
        *(
            (
                dialect,
                f"fleet drain {mode}: limit never binding / no limit",
                lambda r, d=dialect, m=mode: g(r, d, "ours", "fleet", "drain", m, "ratio"),
                ">=",
                0.9,
                "x",
            )
            for dialect in ("postgres", "sqlite")
            for mode in ("c1", "c8")
        ),
        (
            "postgres",
            "keyed fleet claim p99, 10,000 keys (ms)",
            lambda r: g(r, "postgres", "ours", "fleet", "claim", "p99_ms"),
            "<",
            5.0,
            "ms",
        ),
    ]


def targets(results: Results) -> list[dict[str, Any]]:
    """Return the targets with the measured value and whether each is met."""
    out = []
    for dialect, label, fn, op, threshold, unit in _specs():
        value = fn(results)
        met = None
        if value is not None:
            met = {">=": value >= threshold, "<=": value <= threshold, "<": value < threshold}[op]
        out.append(
            {
                "dialect": dialect,
                "target": label,
                "value": value,
                "op": op,
                "threshold": threshold,
                "unit": unit,
                "met": met,
            }
        )
    return out


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


# (header, path into a system's results, decimals, the error key that explains a gap)
COLUMNS: list[tuple[str, tuple[str, ...], int, str]] = [
    ("enq 1/s", ("enqueue_one", "median"), 0, "enqueue"),
    ("enq bulk/s", ("enqueue_bulk", "median"), 0, "enqueue"),
    ("drain c1/s", ("drain", "c1", "median"), 0, "drain_c1"),
    ("drain c8/s", ("drain", "c8", "median"), 0, "drain_c8"),
    ("drain b256/s", ("drain", "batch256", "median"), 0, "drain_batch256"),
    ("pickup p50 ms", ("pickup", "p50_ms"), 2, "pickup"),
    ("p95 ms", ("pickup", "p95_ms"), 2, "pickup"),
    ("idle CPU %", ("pickup", "idle_cpu_pct"), 2, "pickup"),
    ("idle RSS MB", ("pickup", "idle_rss_mb"), 0, "pickup"),
    ("late p50 ms", ("lateness", "p50_ms"), 2, "lateness"),
    ("late p95 ms", ("lateness", "p95_ms"), 2, "lateness"),
    ("trickle late p95 ms", ("lateness", "trickle", "p95_ms"), 2, "lateness"),
    ("claim empty ms", ("claim", "empty_ms"), 3, "claim"),
    ("claim big ms", ("claim", "big_ms"), 3, "claim"),
    ("big/empty", ("claim", "ratio"), 2, "claim"),
]


def table(results: Results, dialect: str) -> str:
    """Render one dialect's system × metric table in Markdown."""
    head = ["system"] + [c[0] for c in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in ORDER:
        if key not in results.get(dialect, {}):
            continue
        row = [SYSTEMS[key].label]
        errors = results[dialect][key].get("errors", {})
        for _label, path, digits, error_key in COLUMNS:
            value = _get(results, dialect, key, *path)
            failed = error_key in errors or "setup" in errors
            row.append("error" if value is None and failed else _fmt(value, digits))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def cost_table(results: Results) -> str:
    """Render PostgreSQL transactions and tuples written per drained task, per mode."""
    modes = ("c1", "c8", "batch256")
    lines = [
        "| system | " + " | ".join(f"{m} xacts/task | {m} tuples/task" for m in modes) + " |",
        "|" + "---|" * (1 + 2 * len(modes)),
    ]
    for key in ORDER:
        drains = results.get("postgres", {}).get(key, {}).get("drain", {})
        if not drains:
            continue
        row = [SYSTEMS[key].label]
        for m in modes:
            cost = drains.get(m, {}).get("db_cost")
            row += [_fmt(cost and cost["commits_per_task"], 2), _fmt(cost and cost["tuples_written_per_task"], 1)]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def fleet_table(results: Results) -> str:
    """Render ours' fleet figures per dialect: drains with and without a limit, the keyed claim."""
    lines = [
        "| dialect | c1 no limit/s | c1 limited/s | c1 ratio | c8 no limit/s | c8 limited/s | c8 ratio "
        "| keyed claim p50 ms | p99 ms | max ms |",
        "|" + "---|" * 10,
    ]
    for dialect in ("postgres", "sqlite"):
        if not results.get(dialect, {}).get("ours", {}).get("fleet"):
            continue
        row = [dialect]
        for mode in ("c1", "c8"):
            path = ("fleet", "drain", mode)
            row += [
                _fmt(_get(results, dialect, "ours", *path, "plain", "median")),
                _fmt(_get(results, dialect, "ours", *path, "limited", "median")),
                _fmt(_get(results, dialect, "ours", *path, "ratio"), 2),
            ]
        claim = ("fleet", "claim")
        row += [_fmt(_get(results, dialect, "ours", *claim, key), 2) for key in ("p50_ms", "p99_ms", "max_ms")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _has_fleet(results: Results) -> bool:
    return any(results.get(d, {}).get("ours", {}).get("fleet") for d in ("postgres", "sqlite"))


def render(payload: dict[str, Any]) -> str:
    results = payload["results"]
    parts = []
    for dialect in ("postgres", "sqlite"):
        if not results.get(dialect):
            continue
        parts.append(f"### {dialect}\n\n{table(results, dialect)}")
        if dialect == "postgres" and any(v.get("drain") for v in results[dialect].values()):
            parts.append(
                "PostgreSQL cost of a drain, per task (pg_stat_database: transactions committed, "
                "counting a listener's NOTIFY reads; tuples inserted + updated + deleted):\n\n" + cost_table(results)
            )
        errors = [(k, m, e) for k, v in results[dialect].items() for m, e in v.get("errors", {}).items()]
        if errors:
            parts.append("errors:\n" + "\n".join(f"- {k} {m}: {e}" for k, m, e in errors))
    for dialect in ("postgres", "sqlite"):
        for key, cell in results.get(dialect, {}).items():
            for mode, prof in cell.get("profiles", {}).items():
                frames = "\n".join(f"    {pct:5.1f}%  {frame}" for frame, pct in prof["top_cairnq_django_pct"][:8])
                parts.append(
                    f"profile {key}/{dialect} drain {mode} ({prof['samples']} samples, each charged to the "
                    f"innermost cairnq_django function on its stack; stacks in {prof['file']}):\n{frames}"
                )
    if _has_fleet(results):
        parts.append("### fleet limits (ours)\n\n" + fleet_table(results))
    rows = ["| dialect | target | measured | wanted | met |", "|---|---|---|---|---|"]
    for t in payload["targets"]:
        value = "—" if t["value"] is None else f"{t['value']:.2f}{' ' + t['unit'] if t['unit'] != 'x' else '×'}"
        met = {True: "yes", False: "NO", None: "not measured"}[t["met"]]
        rows.append(f"| {t['dialect']} | {t['target']} | {value} | {t['op']} {t['threshold']:g} | {met} |")
    parts.append("### targets\n\n" + "\n".join(rows))
    return "\n\n".join(parts)


def markdown(payload: dict[str, Any]) -> str:
    """Render the tables ``docs/performance.md`` carries, for pasting from a full run."""
    results = payload["results"]
    parts = []
    for dialect in ("postgres", "sqlite"):
        if not results.get(dialect):
            continue
        parts.append(f"#### {dialect}\n\n{table(results, dialect)}")
        if dialect == "postgres" and any(v.get("drain") for v in results[dialect].values()):
            parts.append(
                "PostgreSQL cost of a drain, per task (`pg_stat_database`: transactions committed — a "
                "LISTENing backend commits one per NOTIFY it reads — and tuples inserted + updated + deleted):"
                "\n\n" + cost_table(results)
            )
    if _has_fleet(results):
        parts.append("#### Fleet limits (ours)\n\n" + fleet_table(results))
    rows = ["| dialect | target | measured | wanted | met |", "|---|---|---|---|---|"]
    for t in payload["targets"]:
        value = "—" if t["value"] is None else f"{t['value']:.2f}{' ' + t['unit'] if t['unit'] != 'x' else '×'}"
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        rows.append(f"| {t['dialect']} | {t['target']} | {value} | {t['op']} {t['threshold']:g} | {met} |")
    parts.append("#### Targets, as ratios of this run\n\n" + "\n".join(rows))
    return "\n\n".join(parts) + "\n"
