"""The store contract is complete: ``Store`` declares everything its callers use.

The worker, its housekeeping, the handler's context and ``testing`` call the
store only through ``Store``; a method they call that ``Store`` does not
declare would force a cast to the SQL store and hide the real contract.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import cairnq_django
from cairnq_django.store.base import Store
from cairnq_django.store.postgres.store import PostgresStore
from cairnq_django.store.sqlite.store import SQLiteStore

PACKAGE = Path(cairnq_django.__file__).parent
# Modules that hold a store and call it.
CALLERS = [
    *sorted((PACKAGE / "worker").glob("*.py")),
    PACKAGE / "tasks" / "context.py",
    PACKAGE / "tasks" / "periodic.py",
    PACKAGE / "testing.py",
    PACKAGE / "client" / "retention.py",
]
STORE_NAMES = {"store", "_store"}


def _store_calls(path: Path) -> set[str]:
    """Names of methods called on ``store``, ``self.store`` or ``self._store`` in a module."""
    called = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        owner = node.func.value
        if isinstance(owner, ast.Name) and owner.id in STORE_NAMES:
            called.add(node.func.attr)
        elif isinstance(owner, ast.Attribute) and owner.attr in STORE_NAMES:
            called.add(node.func.attr)
    return called


def test_store_is_an_abstract_base_class() -> None:
    assert inspect.isabstract(Store)
    with pytest.raises(TypeError):
        Store()  # type: ignore[abstract]


@pytest.mark.parametrize("path", CALLERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_every_method_a_caller_uses_is_declared_abstract(path: Path) -> None:
    declared = set(Store.__abstractmethods__) | {"claim"}  # claim: one draw of claim_session
    missing = _store_calls(path) - declared
    assert not missing, f"{path.name} calls {sorted(missing)} beyond the Store contract"


def test_both_dialect_stores_implement_the_whole_contract() -> None:
    for cls in (PostgresStore, SQLiteStore):
        assert not inspect.isabstract(cls), f"{cls.__name__} leaves {cls.__abstractmethods__}"


def test_no_module_casts_to_a_concrete_store() -> None:
    offenders = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "SQLStore" in path.read_text("utf-8") and "cast(" in path.read_text("utf-8")
    ]
    assert offenders == []
