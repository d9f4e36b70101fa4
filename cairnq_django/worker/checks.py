"""System checks for worker configuration (``cairnq.W010``; see docs/checks.md)."""

from __future__ import annotations

from typing import Any

from django.core import checks


def resource_errors(resources: dict[str, Any]) -> list[str]:
    """Return one message per registered task naming an undeclared resource."""
    from ..tasks.registry import registered

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
    """``cairnq.W010``: a ``@task(resource=...)`` names a resource CAIRNQ["RESOURCES"] lacks.

    A warning, not an error: a host may declare it with ``cairnq_worker
    --resource NAME=N`` (docs/deployment.md), which ``check`` and ``migrate``
    cannot see. The worker itself still refuses to start while a resource it
    would need is declared neither way.
    """
    from ..conf import get_config

    resources = get_config().get("RESOURCES") or {}
    if not isinstance(resources, dict):
        return []  # the foundation's configuration check reports the wrong type
    return [
        checks.Warning(
            message,
            hint='Add it to CAIRNQ["RESOURCES"] (e.g. {"gpu": 1}) or start the worker with --resource NAME=N.',
            id="cairnq.W010",
        )
        for message in resource_errors(resources)
    ]
