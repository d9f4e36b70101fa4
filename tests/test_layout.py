"""The package's import structure: no cycle among module-level imports, and
every import written inside a function says why on its line or the line above.

Pins: a module that imports another at the top while that one imports it back
(Python then hands one of them a half-built module, and only the import order
of the day decides which); and a function-level import added to dodge such a
cycle, or out of habit, where a top-level import would do. Imports under
``if TYPE_CHECKING:`` are for annotations only and are not edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cairnq_django"
ROOT = PACKAGE.name

def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _top_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: outside functions and ``if TYPE_CHECKING:``."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                pending.extend(node.body)
            pending.extend(node.orelse)
        elif isinstance(node, (ast.Try, ast.With)):
            pending.extend(node.body)
            if isinstance(node, ast.Try):
                for handler in node.handlers:
                    pending.extend(handler.body)
                pending.extend(node.orelse + node.finalbody)
        elif isinstance(node, ast.ClassDef):
            pending.extend(node.body)


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The package modules whose code an import statement needs.

    ``from pkg import name`` needs ``pkg.name`` when that is a module, else
    ``pkg`` itself. The parent packages Python initialises first are not
    counted: a child never needs its parent to have finished.
    """
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".")
            base = base if is_package else base[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        wanted = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem for alias in node.names]
    return {name for name in wanted if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        edges: set[str] = set()
        for node in _top_level_imports(tree):
            edges |= _targets(module, path.name == "__init__.py", node, known)
        graph[module] = edges
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_graph_sees_the_package() -> None:
    graph = import_graph()
    assert f"{ROOT}.worker.loop" in graph and f"{ROOT}.tasks.registry" in graph
    # A known edge, so a broken resolver cannot pass the cycle test by finding nothing.
    assert f"{ROOT}.conf" in graph[f"{ROOT}.store"]
    assert f"{ROOT}.client.submit" in graph[ROOT]


def test_no_import_cycle() -> None:
    # An edge to a package's __init__ (``from pkg import name`` of a name it
    # defines) is an edge like any other, so a cycle through one counts.
    cycle = _cycle(import_graph())
    assert cycle is None, " -> ".join(cycle or [])


def function_level_imports(path: Path) -> Iterator[tuple[int, bool]]:
    """(line, has a reason) for each import inside a function of ``path``."""
    source = path.read_text("utf-8")
    lines = source.splitlines()
    tree = ast.parse(source, str(path))
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                here = lines[node.lineno - 1]
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                reasoned = ("#" in here and "noqa" not in here.split("#", 1)[1][:5]) or above.startswith("#")
                yield node.lineno, reasoned


def test_function_level_imports_say_why() -> None:
    # A known deferred import (apps.ready), so a walker that finds none cannot pass.
    assert list(function_level_imports(PACKAGE / "apps.py"))
    # Every module, migrations included: a new unexplained one fails here.
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        missing += [f"{relative}:{line}" for line, reasoned in function_level_imports(path) if not reasoned]
    assert missing == [], "function-level imports without a one-line reason: " + ", ".join(missing)
