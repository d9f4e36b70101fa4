"""System checks for worker configuration (``cairnq.E010``...; see docs/checks.md)."""

from __future__ import annotations

from typing import Any

from django.core import checks


def resource_errors(resources: dict[str, Any]) -> list[str]:
    """Return one message per registered task naming an undeclared resource."""
    from ..registry import registered

    declared = ", ".join(sorted(resources)) or "none"
    return [
        f"task {definition.name!r} uses resource {definition.resource!r}, which is not declared; "
        f"declared resources: {declared}"
        for definition in registered().values()
        if definition.resource is not None and definition.resource not in resources
    ]


@checks.register("cairnq")
def check_task_resources(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """``cairnq.E010``: a ``@task(resource=...)`` names a resource CAIRNQ["RESOURCES"] lacks."""
    from ..conf import get_config

    resources = get_config().get("RESOURCES") or {}
    if not isinstance(resources, dict):
        return []  # the foundation's configuration check reports the wrong type
    return [
        checks.Error(
            message,
            hint='Add it to CAIRNQ["RESOURCES"] (e.g. {"gpu": 1}) or pass --resource NAME=N to the worker.',
            id="cairnq.E010",
        )
        for message in resource_errors(resources)
    ]
