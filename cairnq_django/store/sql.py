"""Load the per-dialect SQL statements shipped in ``cairnq_django/sql``."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

DIALECTS = ("sqlite", "postgres")


@lru_cache(maxsize=None)
def load(dialect: str, name: str) -> str:
    """Return the text of ``sql/<dialect>/<name>.sql``; read once per process."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    return resources.files("cairnq_django").joinpath("sql", dialect, f"{name}.sql").read_text("utf-8")


def statement_names(dialect: str, folder: str = "") -> set[str]:
    """List the statements a dialect ships (used to keep both dialects in step)."""
    base = resources.files("cairnq_django").joinpath("sql", dialect, *([folder] if folder else []))
    return {entry.name[:-4] for entry in base.iterdir() if entry.name.endswith(".sql")}
