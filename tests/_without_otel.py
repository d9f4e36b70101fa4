"""A directory that, first on a subprocess's ``PYTHONPATH``, makes opentelemetry unimportable there.

Its ``sitecustomize`` (run by every interpreter at start-up, ``manage.py``
included) puts first on ``sys.meta_path`` a finder that refuses every
``opentelemetry`` module with the ``ModuleNotFoundError`` an interpreter
without the ``otel`` extra raises, and at exit prints to stderr
``opentelemetry modules imported: [...]``. ``switch_interval`` makes the interpreter
switch threads that often (``sys.setswitchinterval``), so thread races show
up in a few runs instead of a few hundred.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

_SITECUSTOMIZE = '''
import atexit
import sys


class _NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoOpenTelemetry())
# Proof for the test that the blocker ran and held, whatever the process.
atexit.register(lambda: print(
    "opentelemetry modules imported:", sorted(m for m in sys.modules if m.startswith("opentelemetry")), file=sys.stderr
))
'''


def without_otel_pythonpath(directory: Path, switch_interval: float | None = None) -> str:
    """Write the blocker in ``directory``; return the ``PYTHONPATH`` (it, then the checkout) to run with."""
    directory.mkdir(parents=True, exist_ok=True)
    source = _SITECUSTOMIZE
    if switch_interval is not None:
        source += f"sys.setswitchinterval({switch_interval!r})\n"
    (directory / "sitecustomize.py").write_text(source)
    return f"{directory}:{REPO}"
