"""System checks for cairnq_django (ids cairnq.E001...; see docs/checks.md)."""

from __future__ import annotations

from typing import Any

from django.core import checks


@checks.register("cairnq")
def check_configuration(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    return []
