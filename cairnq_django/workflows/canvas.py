"""Celery-style composition over ``Workflow``: signatures, ``chain``, ``group`` and ``chord``.

    cairnq.chain(fetch.s({"url": u}), parse.s(), index.s()).submit()
    cairnq.group(resize.s({"img": i}) for i in imgs).submit()
    cairnq.chord((resize.s({"img": i}) for i in imgs), notify.s({"album": 7})).submit()

Each builds a ``Workflow`` whose nodes are named after their tasks
(``parse``, then ``parse-2`` for a second ``parse``), so ``run.results()``
reads the same way. A step gets its own payload, never its parent's result
as an argument: it reads that with ``ctx.parent_results()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .graph import WorkflowError
from .workflow import Workflow, task_name_of


@dataclass(frozen=True)
class Signature:
    """A task with its payload and submit options, not submitted yet (``task.s(payload, **options)``)."""

    task: str
    payload: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<Signature {self.task} {self.payload!r}>"


def signature(task: Any, payload: dict[str, Any] | None = None, **options: Any) -> Signature:
    """``task.s(...)`` for a task given by name or handler."""
    return Signature(task_name_of(task), payload, options)


def _signatures(steps: Iterable[Any], what: str) -> list[Signature]:
    found = []
    for step in steps:
        if not isinstance(step, Signature):
            raise WorkflowError(f"{what} takes signatures (task.s(payload)), not {step!r}")
        found.append(step)
    if not found:
        raise WorkflowError(f"{what} needs at least one signature")
    return found


class _Namer:
    """Node names after their tasks: the first ``parse`` is ``parse``, the next ``parse-2``."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, task: str) -> str:
        count = self.seen[task] = self.seen.get(task, 0) + 1
        return task if count == 1 else f"{task}-{count}"


class _Composed(Workflow):
    def _step(self, namer: _Namer, step: Signature, after: list[str]) -> str:
        name = namer(step.task)
        self.add(name, step.task, step.payload, after=after, **step.options)
        return name


class chain(_Composed):  # noqa: N801 - named as users know it from Celery
    """Steps that run one after another; a step whose parent failed is canceled."""

    kind = "chain"

    def __init__(self, *steps: Signature, name: str = "chain", key: str | None = None) -> None:
        super().__init__(name, key=key)
        namer = _Namer()
        previous: list[str] = []
        for step in _signatures(steps, "chain()"):
            previous = [self._step(namer, step, previous)]


class group(_Composed):  # noqa: N801
    """Steps that run side by side, none waiting for another."""

    kind = "group"

    def __init__(self, steps: Iterable[Signature], *, name: str = "group", key: str | None = None) -> None:
        super().__init__(name, key=key)
        namer = _Namer()
        for step in _signatures(steps, "group()"):
            self._step(namer, step, [])


class chord(_Composed):  # noqa: N801
    """A group (the header) and a callback that runs once all of it ended.

    The callback is canceled if a header step failed, unless
    ``on_parent_failure="run"`` asks it to run anyway (it then reads which
    ones did in ``ctx.parent_results()``).
    """

    kind = "chord"

    def __init__(
        self,
        header: Iterable[Signature],
        body: Signature,
        *,
        name: str = "chord",
        key: str | None = None,
        on_parent_failure: str = "cancel",
    ) -> None:
        super().__init__(name, key=key)
        namer = _Namer()
        heads = [self._step(namer, step, []) for step in _signatures(header, "chord()")]
        [callback] = _signatures([body], "chord()'s callback")
        self.add(namer(callback.task), callback.task, callback.payload, after=heads,
                 on_parent_failure=on_parent_failure, **callback.options)
