"""Delete the rows of finished workflow runs once their tasks' rows are all purged (docs/workflows.md).

The workflow tables follow the retention of their tasks: a run is deleted,
with its nodes and edges, when it has ended (not ``running``, no node left)
and none of its nodes' tasks has a row in ``cairnq_tasks`` any more. A run
keeps its rows while one task row stays (its results are read from there),
and a running run is never touched: its nodes record their outcome in their
own rows, so a task purged early strands nothing.

``forget_finished_runs`` walks the finished runs in pages by id, each page
one bounded read and one short transaction, after each retention sweep
(``client/retention.py``) and each ``cairnq_purge``. A walk, not a hook on the
purged ids: a run can end after its last row went (the repair pass ends a
node whose row was purged first), and another SDK's purge tells us nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import connections, transaction

# Runs one page reads. The deletes take their nodes and edges too (a run may
# have up to 20,000 nodes), so a page stays small to keep each transaction short.
DEFAULT_PAGE = 200

# The page's runs that have ended and of whose nodes none still has a task
# row (the nodes' run_id index, then the tasks' primary key), checked
# in the delete itself on the run's own columns: a retry_workflow that made
# one running again since the page was read wins (PostgreSQL re-reads a row
# another transaction changed before deleting it).
_DELETE_RUNS = """
DELETE FROM cairnq_django_workflow
WHERE id > %(after)s AND id <= %(last)s AND status <> 'running' AND nodes_left = 0
AND NOT EXISTS (
    SELECT 1 FROM cairnq_django_workflow_node n JOIN cairnq_tasks t ON t.id = n.task_id
    WHERE n.run_id = cairnq_django_workflow.id
)
"""
# The next page of finished runs, by primary key: its last id bounds the range the deletes act on.
_PAGE = """
SELECT id FROM cairnq_django_workflow
WHERE id > %(after)s AND status <> 'running' AND nodes_left = 0
ORDER BY id
LIMIT %(limit)s
"""
# Then what no run holds any more in that range, through the run_id indexes.
_DELETE_EDGES = """
DELETE FROM cairnq_django_workflow_edge
WHERE run_id > %(after)s AND run_id <= %(last)s
AND NOT EXISTS (SELECT 1 FROM cairnq_django_workflow r WHERE r.id = cairnq_django_workflow_edge.run_id)
"""
_DELETE_NODES = """
DELETE FROM cairnq_django_workflow_node
WHERE run_id > %(after)s AND run_id <= %(last)s
AND NOT EXISTS (SELECT 1 FROM cairnq_django_workflow r WHERE r.id = cairnq_django_workflow_node.run_id)
"""


def forget_page(alias: str, after: str, limit: int = DEFAULT_PAGE) -> tuple[int, str | None]:
    """Delete the runs gone among the next ``limit`` finished runs after id ``after``.

    Return (runs deleted, the page's last id to continue after, or None when
    no finished run is left past ``after``).
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(_PAGE, {"after": after, "limit": limit})
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return 0, None
    params = {"after": after, "last": ids[-1]}
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(_DELETE_RUNS, params)
        deleted = cursor.rowcount
        if deleted:
            cursor.execute(_DELETE_EDGES, params)
            cursor.execute(_DELETE_NODES, params)
    return deleted, ids[-1] if len(ids) == limit else None


def forget_finished_runs(
    alias: str,
    *,
    limit: int = DEFAULT_PAGE,
    should_stop: Callable[[], bool] | None = None,
    rest: float = 0.0,
    sleep: Callable[[float], object] = time.sleep,
) -> int:
    """Walk every finished run once, deleting those whose task rows are all gone; return how many.

    As a purge sweep does: ``should_stop`` is asked between pages, and
    between pages it sleeps ``rest`` times the last page's duration.
    """
    total, after = 0, ""
    while True:
        began = time.monotonic()
        deleted, last = forget_page(alias, after, limit)
        total += deleted
        if last is None or (should_stop is not None and should_stop()):
            return total
        after = last
        if rest > 0:
            sleep(rest * (time.monotonic() - began))
