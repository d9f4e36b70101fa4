"""Plans of the shipped PostgreSQL statements as a worker's claim connection makes them.

That connection prepares its statements once, without their values, under
reuse_claim_plans.sql's settings; a plan read any other way may differ.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.db import connection

from cairnq_django.store.sql_files import load

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
# What reuse_claim_plans.sql sets, read from it, so the reset below undoes exactly that.
_CLAIM_CONNECTION_SETTINGS = tuple(re.findall(r"set_config\('(\w+)'", load("postgres", "reuse_claim_plans")))


def explain_generic(name: str, params: dict[str, Any], *, claim_connection: bool = False, analyze: bool = False) -> Any:
    """EXPLAIN statement ``name`` as a generic plan: its text, or with ``analyze`` its JSON root node.

    ``claim_connection`` plans it under all of that connection's settings,
    not only the generic plan.
    """
    order: list[str] = []

    def numbered(match: re.Match[str]) -> str:
        if match.group(1) not in order:
            order.append(match.group(1))
        return f"${order.index(match.group(1)) + 1}"

    text = _PLACEHOLDER.sub(numbered, load("postgres", name))
    options = "(ANALYZE, BUFFERS, FORMAT JSON) " if analyze else ""
    with connection.cursor() as cursor:
        if claim_connection:
            cursor.execute(load("postgres", "reuse_claim_plans"))
        else:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
        try:
            cursor.execute("PREPARE cairnq_generic AS " + text.replace("%", "%%"))
            values = ", ".join(["%s"] * len(order))
            cursor.execute(f"EXPLAIN {options}EXECUTE cairnq_generic({values})", [params[key] for key in order])
            rows = cursor.fetchall()
            cursor.execute("DEALLOCATE cairnq_generic")
        finally:
            for setting in _CLAIM_CONNECTION_SETTINGS:
                cursor.execute(f"RESET {setting}")
    if not analyze:
        return "\n".join(row[0] for row in rows)
    plan = rows[0][0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return plan[0]["Plan"]


def buffers(node: dict[str, Any]) -> int:
    """Shared buffers a plan node read, from cache or disk."""
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])
