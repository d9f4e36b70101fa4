"""OpenTelemetry spans for submits and attempts, with the ``otel`` extra (docs/tracing.md).

The client and the worker call ``publishing`` and ``processing`` here; this
module imports nothing from opentelemetry. The first call loads the span
modules (``producer``, ``consumer``), once per process (the worker does it at
start, ``load``); without opentelemetry-api, or with it but no tracer provider
configured, both hand back shared do-nothing objects.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from ..models import Task
    from ..store.base import SubmitSpec
    from ..tasks.registry import TaskDefinition
    from ..worker.attempt import Attempt

__all__ = ["Publication", "failed", "load", "processing", "publishing"]


class Publication:
    """What a submit call does with its specs; this base records nothing and stamps nothing.

    ``producer.SpanPublication`` is the one with a span.
    """

    __slots__ = ()

    def __enter__(self) -> Publication:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def stamp(self, spec: SubmitSpec) -> SubmitSpec:
        return spec

    def stamp_all(self, specs: Iterable[SubmitSpec]) -> Iterable[SubmitSpec]:
        return specs

    def published(self, rows: Sequence[Task]) -> None:
        return None


UNTRACED = Publication()
NO_SPAN: AbstractContextManager[None] = nullcontext()

# None: not loaded yet; False: opentelemetry-api is not installed.
_modules: tuple[ModuleType, ModuleType] | bool | None = None
# Serialises the first load. Handler threads start at once, and Python does
# not make the same failing import safe in several threads: a thread that
# arrives while another's import fails can get the discarded half-run module
# ("cannot import name 'consumer'", or a module without ``processing``).
_load_lock = threading.Lock()


def load() -> None:
    """Load the span modules now, if not yet; an opentelemetry-api that is installed but fails to import raises."""
    _load()


def _load() -> tuple[ModuleType, ModuleType] | None:
    modules = _modules
    if modules is None:
        modules = _load_once()
    return modules if isinstance(modules, tuple) else None


def _load_once() -> tuple[ModuleType, ModuleType] | bool:
    global _modules
    with _load_lock:
        modules = _modules
        if modules is None:  # else a thread this one waited for loaded them
            modules = _modules = _import_span_modules()
        return modules


def _import_span_modules() -> tuple[ModuleType, ModuleType] | bool:
    if not _api_installed():
        return False
    # Deferred: opentelemetry-api is an optional extra, and importing this
    # package must not import it. It is installed, so an error here is a real
    # fault (a broken or too old install): it propagates, and the next call tries again.
    from . import consumer, producer

    return (producer, consumer)


def _api_installed() -> bool:
    """Whether opentelemetry-api is installed, asked of the import system without importing it."""
    try:
        return importlib.util.find_spec("opentelemetry.trace") is not None
    except ModuleNotFoundError as exc:
        # Not even the ``opentelemetry`` namespace: no opentelemetry distribution at all.
        if exc.name != "opentelemetry":
            raise
        return False


def publishing(queue: str, name: str | None = None) -> AbstractContextManager[Publication]:
    """A context manager around one submit call; it yields the publication that stamps its specs.

    ``name`` is the task name when the call submits one task.
    """
    modules = _load()
    if modules is None:
        return UNTRACED
    return modules[0].publishing(queue, name)  # type: ignore[no-any-return]


def processing(definition: TaskDefinition, attempts: Sequence[Attempt]) -> AbstractContextManager[Any]:
    """A context manager around one handler call: its consumer span, current while the handler runs."""
    modules = _load()
    if modules is None:
        return NO_SPAN
    return modules[1].processing(definition, attempts)  # type: ignore[no-any-return]


def failed(task_id: str, envelope: Mapping[str, Any]) -> None:
    """Mark the running handler call's span failed: its handler failed a task itself (``ctx.fail``)."""
    modules = _load()
    if modules is not None:
        modules[1].failed(task_id, envelope)
