"""One readable error where a client call meets missing tables: ``SchemaNotInstalled``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from django.db import DatabaseError

from ..conf import get_config
from ..exceptions import SchemaNotInstalled
from ..store.missing_schema import is_missing_table

P = ParamSpec("P")
R = TypeVar("R")


def needs_schema(fn: Callable[P, R]) -> Callable[P, R]:
    """Raise ``SchemaNotInstalled`` (one line: what to run) where ``fn`` meets missing tables."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        # A bare try: nothing is paid on the path that succeeds.
        try:
            return fn(*args, **kwargs)
        except DatabaseError as exc:
            if is_missing_table(exc):
                raise SchemaNotInstalled(get_config()["DATABASE"]) from exc
            raise

    return call
