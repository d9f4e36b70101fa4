"""Which entry of the admin's navigation sidebar a cairnq page marks as current.

Django's sidebar (``admin/app_list.html``) marks every model whose list URL
the request's path starts with. The queue dashboard is served under the task
admin's URLs (``…/cairnq/task/dashboard/``), so it lit up "Tasks". Its
template hands the sidebar a stand-in request whose path is the "Queue
dashboard" entry's; every other attribute is the real request's.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse


class SidebarRequest:
    """The request as the sidebar should read it: the same, but at ``path``."""

    def __init__(self, request: HttpRequest, path: str) -> None:
        self._request = request
        self.path = path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


def dashboard_sidebar_request(request: HttpRequest, site_name: str, app_label: str) -> SidebarRequest:
    """The dashboard's place in the sidebar: its own entry, or only its app on a site without that entry."""
    try:
        path = reverse(f"{site_name}:{app_label}_queuedashboard_changelist")
    except NoReverseMatch:
        path = reverse(f"{site_name}:app_list", kwargs={"app_label": app_label})
    return SidebarRequest(request, path)
