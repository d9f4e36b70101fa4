"""OpenTelemetry spans for submits and attempts, with the ``otel`` extra (docs/tracing.md).

The client and the worker call ``publishing`` and ``processing`` here; this
module imports nothing from opentelemetry. The first call tries to load the
span modules (``producer``, ``consumer``); without opentelemetry-api, or with
it but no tracer provider configured, both hand back shared do-nothing objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    from ..models import Task
    from ..store.base import SubmitSpec
    from ..tasks.registry import TaskDefinition
    from ..worker.attempt import Attempt

__all__ = ["Publication", "failed", "processing", "publishing"]


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

# None: not tried yet; False: opentelemetry-api is not installed.
_modules: tuple[ModuleType, ModuleType] | bool | None = None


def _load() -> tuple[ModuleType, ModuleType] | None:
    global _modules
    if _modules is None:
        try:
            # Deferred: opentelemetry-api is an optional extra, and importing
            # this package must not import it (nor fail without it).
            from . import consumer, producer
        except ModuleNotFoundError as exc:
            if not (exc.name or "").startswith("opentelemetry"):
                raise
            _modules = False
        else:
            _modules = (producer, consumer)
    return _modules if isinstance(_modules, tuple) else None


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
