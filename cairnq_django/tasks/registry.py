"""Declare task handlers with ``@task`` and keep the process-wide registry of them.

The default task name is ``"<module>.<qualname>"`` of the decorated function,
e.g. ``"billing.tasks.send_invoice"``. Give a name explicitly
(``@task("invoice.send")``) when other SDKs submit the task or when the
function may move: the name is what is stored in every row.

Options are validated at decoration, so a mistake fails at import with a
message naming the option. Whether a ``resource`` is declared is only known
once settings are read; the system check ``cairnq.W010`` and the worker's
start-up report an undeclared one.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, overload

from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured

from ..protocol import bounds
from ..protocol.limits import LimitKey, Rate, parse_rate

__all__ = [
    "TaskDefinition",
    "TaskDefinitionError",
    "get_task",
    "registered",
    "task",
    "unregister",
]


class TaskDefinitionError(ImproperlyConfigured, ValueError):
    """A ``@task`` option has a value the worker could not honour."""


_lock = threading.Lock()
_registry: dict[str, TaskDefinition] = {}


def _positive_int(option: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskDefinitionError(
            f"@task option {option!r} must be an integer >= 1, got {value!r}"
        )
    return value


def _text(option: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TaskDefinitionError(
            f"@task option {option!r} must be a non-empty string, got {value!r}"
        )
    if bounds.text_problem(value) is not None:
        raise TaskDefinitionError(
            f"@task option {option!r} must be at most 1024 bytes of UTF-8 without NUL or a lone surrogate, "
            f"got {value[:40]!r}{'...' if len(value) > 40 else ''}"
        )
    return value


def _in_range(allowed: bounds.IntRange) -> Callable[[str, Any], int]:
    """A check for an option that lands in a column: refused at decoration, not at submit."""

    def check(option: str, value: Any) -> int:
        problem = allowed.problem(value)
        if problem is not None:
            raise TaskDefinitionError(f"@task option {option!r} {problem}")
        return int(value)

    return check


def _rate(option: str, value: Any) -> Rate:
    try:
        return parse_rate(value)
    except ValueError as exc:
        raise TaskDefinitionError(f"@task option {option!r} {exc}") from None


def _limit_key(option: str, value: Any) -> LimitKey:
    if callable(value):
        return value  # type: ignore[no-any-return]
    if not isinstance(value, str):
        raise TaskDefinitionError(
            f"@task option {option!r} must be a payload field name or a callable of the payload, got {value!r}"
        )
    return _text(option, value)


_OPTION_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "queue": _text,
    "resource": _text,
    "batch": _positive_int,
    "concurrency": _positive_int,
    "max_attempts": _in_range(bounds.MAX_ATTEMPTS),
    "priority": _in_range(bounds.PRIORITY),
    "global_concurrency": _in_range(bounds.COUNT),
    "rate_limit": _rate,
    "limit_key": _limit_key,
}


def _check_fleet_options(options: dict[str, Any]) -> None:
    """The rules between the fleet options; each option alone was checked already."""
    if options["limit_key"] is not None:
        if options["global_concurrency"] is None and options["rate_limit"] is None:
            raise TaskDefinitionError(
                "@task option 'limit_key' needs 'global_concurrency' or 'rate_limit': it says what they count per"
            )
        if options["batch"] is not None:
            raise TaskDefinitionError(
                "@task options 'limit_key' and 'batch' cannot be combined: one batch call mixes keys"
            )


def _positional_count(func: Callable[..., Any]) -> int:
    """Count the positional parameters, so ``(ctx)`` handlers are called without payload."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return 2
    count = 0
    for param in params:
        if param.kind is param.VAR_POSITIONAL:
            return 2
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            count += 1
    return count


class TaskDefinition:
    """A registered handler: still callable as the plain function, plus ``submit``/``call``."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str,
        queue: str | None,
        batch: int | None,
        concurrency: int | None,
        resource: str | None,
        max_attempts: int | None,
        priority: int | None,
        global_concurrency: int | None = None,
        rate_limit: Rate | None = None,
        limit_key: LimitKey | None = None,
    ) -> None:
        self.func = func
        self.name = name
        self.queue = queue
        self.batch = batch
        self.concurrency = concurrency
        self.resource = resource
        self.max_attempts = max_attempts
        self.priority = priority
        # Fleet limits (docs/limits.md): counted in the claim across every worker.
        self.global_concurrency = global_concurrency
        self.rate_limit = rate_limit
        self.limit_key = limit_key
        self.is_async = inspect.iscoroutinefunction(func)
        # Batch handlers receive one list; single-task ones (ctx, payload) or (ctx).
        self.takes_payload = batch is None and _positional_count(func) >= 2
        functools.update_wrapper(self, func)

    def __repr__(self) -> str:
        extras = "".join(
            f" {key}={value!r}"
            for key, value in (
                ("queue", self.queue),
                ("batch", self.batch),
                ("concurrency", self.concurrency),
                ("resource", self.resource),
                ("global_concurrency", self.global_concurrency),
                ("rate_limit", self.rate_limit),
            )
            if value is not None
        )
        return f"<TaskDefinition {self.name}{extras}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    @property
    def own_source(self) -> bool:
        """True if this name draws its own claim quota (protocol 4.3)."""
        return (
            self.batch is not None
            or self.concurrency is not None
            or self.resource is not None
            or self.fleet_limited
        )

    @property
    def fleet_limited(self) -> bool:
        """True if the name has limits of its own counted across the fleet."""
        return self.global_concurrency is not None or self.rate_limit is not None

    def submit(self, payload: Any = None, **options: Any) -> Any:
        """Submit a task for this handler; the decorator's queue/priority/max_attempts are defaults.

        Those defaults are applied by ``submit`` itself, for any submit of a
        declared name (``client/declared.py``).
        """
        from ..client.submit import submit  # the client imports the registry (unknown-task rule)

        return submit(self.name, payload, **options)

    def s(self, payload: Any = None, **options: Any) -> Any:
        """A signature of this task: its payload and submit options, for ``chain``, ``group`` and ``chord``."""
        # The canvas reads the models: not importable while the app registry loads this module.
        from ..workflows.canvas import Signature

        return Signature(self.name, payload, options)

    def call(
        self, payload: Any = None, *, timeout: float | None = None, **options: Any
    ) -> Any:
        """Submit and wait; return the result or raise ``TaskFailed``/``TaskCanceled``/``TaskTimeout``."""
        from ..client.wait import call  # the client imports the registry (unknown-task rule)

        if timeout is not None:
            options["timeout"] = timeout
        return call(self.name, payload, **options)

    async def asubmit(self, payload: Any = None, **options: Any) -> Any:
        return await sync_to_async(self.submit, thread_sensitive=True)(
            payload, **options
        )

    async def acall(
        self, payload: Any = None, *, timeout: float | None = None, **options: Any
    ) -> Any:
        return await sync_to_async(self.call, thread_sensitive=False)(
            payload, timeout=timeout, **options
        )


def _define(
    func: Callable[..., Any], name: str | None, **options: Any
) -> TaskDefinition:
    if isinstance(func, TaskDefinition):
        func = func.func
    if not callable(func):
        raise TaskDefinitionError(f"@task must decorate a function, got {func!r}")
    if name is None:
        name = f"{func.__module__}.{func.__qualname__}"
    _text("name", name)
    # Each option is checked only when given; None means "not set".
    for option, check in _OPTION_CHECKS.items():
        if options[option] is not None:
            options[option] = check(option, options[option])
    _check_fleet_options(options)
    queue, resource = options["queue"], options["resource"]
    batch, concurrency = options["batch"], options["concurrency"]
    max_attempts, priority = options["max_attempts"], options["priority"]
    definition = TaskDefinition(
        func,
        name=name,
        queue=queue,
        batch=batch,
        concurrency=concurrency,
        resource=resource,
        max_attempts=max_attempts,
        priority=priority,
        global_concurrency=options["global_concurrency"],
        rate_limit=options["rate_limit"],
        limit_key=options["limit_key"],
    )
    with _lock:
        existing = _registry.get(name)
        if existing is not None and not _same_function(existing.func, func):
            raise TaskDefinitionError(
                f"task name {name!r} is already registered by "
                f"{existing.func.__module__}.{existing.func.__qualname__}"
            )
        _registry[name] = definition
    return definition


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. as __main__ and by name, or re-imported by
    # autoreload) defines a new function object for the same handler.
    return a is b or (
        getattr(a, "__module__", None) == getattr(b, "__module__", None)
        and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
    )


@overload
def task(func: Callable[..., Any], /) -> TaskDefinition: ...


@overload
def task(
    name: str | None = None,
    /,
    *,
    queue: str | None = None,
    batch: int | None = None,
    concurrency: int | None = None,
    resource: str | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    global_concurrency: int | None = None,
    rate_limit: str | None = None,
    limit_key: LimitKey | None = None,
) -> Callable[[Callable[..., Any]], TaskDefinition]: ...


def task(
    name_or_func: Any = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    batch: int | None = None,
    concurrency: int | None = None,
    resource: str | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    global_concurrency: int | None = None,
    rate_limit: str | None = None,
    limit_key: LimitKey | None = None,
) -> Any:
    """Register a handler: ``@task``, ``@task("name")`` or ``@task(batch=..., resource=...)``.

    ``queue``, ``max_attempts`` and ``priority`` are the defaults of every
    submit of the name in this process (``.submit()``/``.call()``,
    ``cairnq_django.submit(name)``, ``ctx.submit``, periodic ticks);
    ``batch``, ``concurrency`` and ``resource`` shape how a worker claims
    and calls it. ``global_concurrency``, ``rate_limit`` and ``limit_key``
    are counted across every worker of the fleet (docs/limits.md).
    """
    options = {
        "queue": queue,
        "batch": batch,
        "concurrency": concurrency,
        "resource": resource,
        "max_attempts": max_attempts,
        "priority": priority,
        "global_concurrency": global_concurrency,
        "rate_limit": rate_limit,
        "limit_key": limit_key,
    }
    if callable(name_or_func) and not isinstance(name_or_func, str):
        return _define(name_or_func, name, **options)
    if name_or_func is not None:
        if name is not None:
            raise TaskDefinitionError(
                "@task got the name both positionally and as name="
            )
        name = _text("name", name_or_func)

    def decorate(func: Callable[..., Any]) -> TaskDefinition:
        return _define(func, name, **options)

    return decorate


def get_task(name: str) -> TaskDefinition | None:
    """Return the registered handler for ``name``, or None."""
    return _registry.get(name)


def registered() -> dict[str, TaskDefinition]:
    """Return a snapshot of every registered handler, in registration order."""
    with _lock:
        return dict(_registry)


def unregister(name: str) -> TaskDefinition | None:
    """Remove a handler (tests; a worker already running fails its claimed rows with ``no_handler``)."""
    with _lock:
        return _registry.pop(name, None)
