"""The task changelist's page query: always one page, and bounded on a million rows."""

from __future__ import annotations

from django.contrib.admin.views.main import ChangeList
from django.db import connections
from django.http import HttpRequest

from .index_blind import sorted_apart_from_indexes
from .paginator import COUNT_CAP


class BoundedChangeList(ChangeList):
    """Django's changelist, whose page query always carries a LIMIT.

    Django fetches a result that fits on one page without one (it has just
    counted it); on SQLite, with a filter matching nothing, that query walks
    the whole table in key order.
    """

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        page_query = self.queryset
        exact = getattr(self.paginator, "estimated", None) is None
        if (
            connections[page_query.db].vendor == "sqlite"
            and page_query.query.where
            and exact
            and self.result_count <= COUNT_CAP
        ):
            page_query = sorted_apart_from_indexes(page_query)
        if self.show_all and self.can_show_all:
            self.result_list = page_query._clone()
        elif not self.multi_page:
            self.result_list = page_query[: self.list_per_page]
        elif page_query is not self.queryset:
            bottom = (self.page_num - 1) * self.list_per_page
            self.result_list = page_query[bottom : bottom + self.list_per_page]
