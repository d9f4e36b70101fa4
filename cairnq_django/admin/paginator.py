"""The changelist's paginator: a capped count instead of ``COUNT(*)`` over the table."""

from __future__ import annotations

from typing import cast

from django.core.paginator import Paginator
from django.db import connections
from django.db.models import QuerySet
from django.utils.functional import cached_property

from ..models import Task
from ..store.sql_files import statement

# Rows counted exactly before the paginator settles for "more than this".
COUNT_CAP = 10_000


class EstimatedCountPaginator(Paginator):
    """Count at most ``COUNT_CAP + 1`` rows; past that, estimate.

    An exact ``COUNT(*)`` over a million rows costs a full scan per page view.
    The capped count is ``SELECT COUNT(*) FROM (... LIMIT cap+1)``. When the
    unfiltered table is over the cap, PostgreSQL's planner statistics
    (``pg_class.reltuples``) give the size; otherwise the count reads "cap+".
    ``estimated`` tells the template to say so.
    """

    # None: the count is exact; "about": a planner estimate; "more": a lower bound.
    estimated: str | None = None

    @cached_property
    def count(self) -> int:
        queryset = cast(QuerySet[Task], self.object_list)
        capped = queryset.order_by()[: COUNT_CAP + 1].count()
        if capped <= COUNT_CAP:
            return capped
        if not queryset.query.where:
            approx = _table_estimate(queryset.db, queryset.model._meta.db_table)
            if approx is not None and approx > COUNT_CAP:
                self.estimated = "about"
                return approx
        self.estimated = "more"
        return COUNT_CAP


def _table_estimate(alias: str, table: str) -> int | None:
    """Return PostgreSQL's row estimate for the listed table (None elsewhere or if never analyzed)."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(statement("postgres", "table_estimate"), {"table": table})
        row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0:
        return None
    return int(row[0])
