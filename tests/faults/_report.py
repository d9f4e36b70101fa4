"""Render the figures the fault cases wrote (JSON lines) as one Markdown table.

``python -m tests.faults._report var/faults-sqlite.jsonl var/faults-postgres.jsonl``
prints: case, dialect, tasks, faults injected, lost, duplicates (and why), result.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def _case(line: dict[str, object]) -> str:
    name = str(line.get("case", ""))
    match = re.match(r"test_(f\d+[a-z]?)_(.*)", name)
    if not match:
        return name
    return f"{match.group(1).upper()} {match.group(2).replace('_', ' ')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--seconds", type=int, default=None)
    args = parser.parse_args()
    lines = []
    for report in args.reports:
        if report.exists():
            lines.extend(json.loads(text) for text in report.read_text().splitlines() if text.strip())
    lines.sort(key=lambda line: (_case(line), str(line.get("dialect"))))
    print("| case | dialect | tasks | faults injected | lost | duplicates (why) | result | s |")
    print("| --- | --- | ---: | --- | ---: | --- | --- | ---: |")
    totals = {"tasks": 0, "lost": 0, "duplicates": 0, "pass": 0, "fail": 0}
    for line in lines:
        why = f" ({line['why']})" if line.get("why") else ""
        print(
            f"| {_case(line)} | {line.get('dialect')} | {line.get('tasks', 0)} | {line.get('faults', '')} "
            f"| {line.get('lost', 0)} | {line.get('duplicates', 0)}{why} | {line.get('result')} "
            f"| {line.get('seconds', '')} |"
        )
        totals["tasks"] += int(line.get("tasks") or 0)
        totals["lost"] += int(line.get("lost") or 0)
        totals["duplicates"] += int(line.get("duplicates") or 0)
        totals["pass" if line.get("result") == "pass" else "fail"] += 1
    took = f" in {args.seconds // 60} min {args.seconds % 60} s" if args.seconds is not None else ""
    print()
    print(
        f"{totals['pass']} passed, {totals['fail']} failed{took}; {totals['tasks']} tasks, "
        f"{totals['lost']} lost, {totals['duplicates']} duplicate executions (each explained by a lost lease)."
    )


if __name__ == "__main__":
    main()
