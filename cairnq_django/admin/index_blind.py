"""SQLite's planner, told not to take an index for an order or a grouping.

SQLite prefers an index that supplies a query's ORDER BY or GROUP BY over
one that narrows its WHERE, which on a million-row task table can mean
walking every row to avoid sorting a few. Wrapping the ordering or grouping
term in a unary ``+`` (the same value) takes that index out of the choice.
PostgreSQL has no unary ``+`` for text and weighs both by statistics, so
these are for SQLite only.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F, Func, OrderBy, QuerySet


class IndexBlind(Func):
    """SQLite's unary ``+``: the same value, but no index can supply its order."""

    template = "(+%(expressions)s)"


def sorted_apart_from_indexes(queryset: QuerySet[Any]) -> QuerySet[Any]:
    """``queryset`` in the same order, which SQLite can then not read off an index.

    SQLite answers ``WHERE queue = ? ORDER BY id DESC LIMIT 50`` by walking
    the primary key and testing every row, which reads the whole table when
    few rows match. Once the count says the filter matches at most
    ``COUNT_CAP`` rows, sorting those is cheap, and without an index that
    supplies the order the planner takes the filter's own index.
    """
    terms = []
    for term in queryset.query.order_by:
        if not isinstance(term, str) or term.lstrip("-") in ("", "?"):
            return queryset
        terms.append(OrderBy(IndexBlind(F(term.lstrip("-"))), descending=term.startswith("-")))
    return queryset.order_by(*terms)
