"""Load the SQL statements each dialect ships in ``store/<dialect>/sql/``."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

from .sql_templates import VARIANTS, render

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

DIALECTS = ("sqlite", "postgres")


@lru_cache(maxsize=None)
def load(dialect: str, name: str) -> str:
    """Return the text of ``store/<dialect>/sql/<name>.sql``, or of the variant ``name``
    rendered from its template (sql_templates.py); read once per process."""
    folder = folder_of(dialect)
    if variant := VARIANTS[dialect].get(name):
        return render(dialect, name, folder.joinpath(f"{variant.template}.template.sql").read_text("utf-8"))
    return folder.joinpath(f"{name}.sql").read_text("utf-8")


def folder_of(dialect: str) -> Traversable:
    """The folder holding a dialect's statements (``schema/`` holds its migrations)."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}")
    return resources.files(f"cairnq_django.store.{dialect}").joinpath("sql")


@lru_cache(maxsize=None)
def statement(dialect: str, name: str) -> str:
    """Return the text the store sends: ``load`` with only its first comment line.

    The comments are for readers of the files; sent along, they would push
    a statement past the size psycopg caches its parse of. The first line
    stays: it names the statement in ``pg_stat_activity`` and Django's query log.
    """
    return sendable(load(dialect, name))


def sendable(text: str) -> str:
    """``text`` with only its first comment line (it names the statement) and no blank lines."""
    first, *rest = text.splitlines()
    code = [line for line in rest if line.strip() and not line.lstrip().startswith("--")]
    return "\n".join([first, *code]) + "\n"


def statement_names(dialect: str, folder: str = "") -> set[str]:
    """List the statements a dialect ships, files and rendered variants (used to keep both dialects in step)."""
    base = folder_of(dialect).joinpath(*([folder] if folder else []))
    files = {entry.name[:-4] for entry in base.iterdir() if entry.name.endswith(".sql")}
    rendered = {name.rpartition("/")[2] for name in VARIANTS[dialect] if name.rpartition("/")[0] == folder}
    return {name for name in files if not name.endswith(".template")} | rendered
